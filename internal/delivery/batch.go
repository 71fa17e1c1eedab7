package delivery

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/eventq/eventq/models"
)

// Group commit: concurrent Ingest calls hand their rows to a few committer goroutines, each of
// which takes every request waiting at that moment and writes them in one statement (a COPY on
// Postgres; on SQLite, prepared 100-row INSERTs in one transaction when there are more); the
// committer's pusher then appends the queued ones to Redis in one round trip while the
// committer writes the next batch. A request is answered only after its own rows are
// committed (and pushed). Under light load a batch is one request, so nothing
// waits for company; under heavy load the batches grow and the per-row cost falls.
const (
	maxBatchRows      = 1000
	unmarkInterval    = 100 * time.Millisecond
	unmarkBatchMaxIDs = 2000
)

type commitRequest struct {
	tenant  uint64
	rows    []models.TrackedEvent
	queued  bool
	pending string // the id of the pending batch its rows were committed with, if queued
	err     error  // the request's own outcome, set by commitBatch
	done    chan error
	// state settles, once, who queues the rows of a commit slower than spoolAfter: its pusher
	// (pushing), or the spool (abandoned: Ingest has spooled them, or is about to).
	state atomic.Int32
}

// States of a commitRequest. A request the pusher takes first was committed, and Ingest
// answers it as such; one Ingest abandons first is spooled, and if its commit lands after all
// its pusher appends it as any other: the spool's drain then stores the spooled copy no
// second time (inserted by id), so each event is stored once and queued once.
const (
	reqOpen int32 = iota
	reqPushing
	reqAbandoned
)

// startCommitters starts the loop that clears pending marks; the group-commit loops start
// with the first commit (startCommitLoops), so a process that never ingests (the worker, the
// CLI) runs none.
func (d *Service) startCommitters() {
	d.wg.Add(1)
	go d.unmarkLoop()
}

func (d *Service) startCommitLoops() {
	n := d.events.Writers() // batches in flight at once
	d.wg.Add(n)
	for i := 0; i < n; i++ {
		go d.commitLoop()
	}
}

// Close stops the committers after the requests already handed to them, and clears the
// pending marks collected so far. Ingest must not be called after Close.
func (d *Service) Close() {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.wg.Wait()
	})
}

// commit hands rows to a committer and waits for the outcome; with the spool on, for
// spoolAfter at most (errCommitSlow: the rows may still be committed, and are then queued
// by id; see reqAbandoned).
func (d *Service) commit(ctx context.Context, tenant uint64, rows []models.TrackedEvent, queued bool) error {
	req := &commitRequest{tenant: tenant, rows: rows, queued: queued, done: make(chan error, 1)}
	d.commitOnce.Do(d.startCommitLoops)
	select {
	case d.requests <- req:
	case <-d.stop:
		return fmt.Errorf("delivery: ingestor closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	if d.limits.Events <= 0 {
		return <-req.done // always answered, even if ctx ends: the rows may be committed
	}
	t := time.NewTimer(spoolAfter)
	defer t.Stop()
	select {
	case err := <-req.done:
		return err
	case <-t.C:
		if req.state.CompareAndSwap(reqOpen, reqAbandoned) {
			return errCommitSlow
		}
		// Committed, and its pusher is appending it (within eventqueue.AppendTimeout, or it
		// keeps it pending). Answered once the append is done: answered before, its client's
		// next request could be committed by another committer, or another api, and appended
		// first, out of order.
		return <-req.done
	}
}

// commitLoop is one committer: it takes every request waiting, writes them as one batch and
// hands the batch to its own pusher (pushLoop), which appends it to Redis and answers its
// requests while the committer writes the next batch. The two stages overlap, and batches
// still reach Redis in the order they were committed.
func (d *Service) commitLoop() {
	defer d.wg.Done()
	pushes := make(chan pushJob) // unbuffered: the committer is at most one batch ahead
	d.wg.Add(1)
	go d.pushLoop(pushes)
	defer close(pushes)
	for {
		var first *commitRequest
		select {
		case first = <-d.requests:
		case <-d.stop:
			return
		}
		batch, rows := []*commitRequest{first}, len(first.rows)
	drain:
		for rows < maxBatchRows {
			select {
			case r := <-d.requests:
				batch, rows = append(batch, r), rows+len(r.rows)
			default:
				break drain
			}
		}
		pushes <- pushJob{batch: batch, stored: d.commitBatch(batch, rows)}
	}
}

// pushJob is a written batch: its requests, and those of them whose rows were committed.
type pushJob struct {
	batch, stored []*commitRequest
}

// pushLoop appends each committed batch's queued rows to Redis, in the order the batches come,
// then answers the batch's requests.
func (d *Service) pushLoop(pushes <-chan pushJob) {
	defer d.wg.Done()
	for job := range pushes {
		d.push(context.Background(), job.stored)
		for _, r := range job.batch {
			r.done <- r.err
		}
	}
}

// commitBatch writes every row of the batch (one COPY, or INSERTs in one transaction) and
// returns the requests whose rows are committed, for the pusher. If the database refuses the
// batch, each request is written again alone, so that only the request whose rows were refused
// fails (its err is set) and every other one succeeds.
func (d *Service) commitBatch(batch []*commitRequest, n int) (stored []*commitRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.store(ctx, batch, n); err != nil {
		if len(batch) == 1 {
			batch[0].err = err
			return nil
		}
		d.log.Warn("delivery: batch refused; writing its requests one by one", "requests", len(batch), "err", err)
		stored = make([]*commitRequest, 0, len(batch))
		for _, r := range batch {
			if r.err = d.store(ctx, []*commitRequest{r}, len(r.rows)); r.err == nil {
				stored = append(stored, r)
			}
		}
		return stored
	}
	return batch
}

// store writes the n rows of reqs, with a pending batch for each tenant whose rows are queued,
// in one atomic statement or transaction: all of them or none.
func (d *Service) store(ctx context.Context, reqs []*commitRequest, n int) error {
	rows := make([]models.TrackedEvent, 0, n)
	for _, r := range reqs {
		rows = append(rows, r.rows...)
	}
	pending, err := newPendingBatches(reqs)
	if err == nil {
		err = d.events.Insert(ctx, rows, pending)
	}
	if err != nil {
		return fmt.Errorf("delivery: store events: %w", err)
	}
	d.down.committed(d.clock.Now())
	d.metrics.Ingested(len(rows))
	return nil
}
