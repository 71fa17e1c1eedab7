package delivery

import (
	"context"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

// A committed event pending (through its pending batch, or marked) reaches its queue through
// push, right after the commit, or through Requeue, later. Both append with
// eventqueue.AppendOnce, so an event already in its queue is never appended again, whoever
// tries and however often. After the append the pending batch is deleted, or the mark
// cleared, in the background (unmarkLoop); then the queue forgets the batch's record
// (ForgetPending), or the marked event's deduplication entry is let expire (ShortenDedup).
// A request's Redis round trip is bounded by eventqueue.AppendTimeout.

// breakerCooldown is how long appends are not even tried after a failure, so that an outage
// costs the requests behind it nothing.
const breakerCooldown = time.Second

// queuedEvent is an appended event whose pending mark is to be cleared.
type queuedEvent struct {
	tenant uint64
	id     string
}

// PushPending appends committed rows marked QueuePending to the tenant's queue, in order, and
// clears their mark. If the append fails the rows stay marked and Requeue pushes them later;
// the failure is logged, not returned, because the events are safe in the database.
func (d *Service) PushPending(ctx context.Context, tenantID uint64, rows []models.TrackedEvent) {
	d.push(ctx, []*commitRequest{{tenant: tenantID, rows: rows, queued: true}})
}

// push appends the queued rows of the stored requests to their tenants' queues, one atomic
// append per tenant in one round trip: a tenant's rows from every request of the batch, in the
// batch's order, so that requests of one tenant cost Redis one script call rather than one
// each. It schedules clearing the marks of those appended. Rows held back (their queue is
// full) stay pending: Requeue appends them as the queue drains.
func (d *Service) push(ctx context.Context, stored []*commitRequest) {
	var batches []eventqueue.Batch
	var reqs [][]*commitRequest  // reqs[i] are the requests of batches[i], in order
	byTenant := map[uint64]int{} // tenant -> its index in batches
	for _, r := range stored {
		if !r.queued {
			continue
		}
		r.state.CompareAndSwap(reqOpen, reqPushing) // Ingest answers it as committed, unless it abandoned it first
		i, ok := byTenant[r.tenant]
		if !ok {
			i = len(batches)
			byTenant[r.tenant] = i
			batches = append(batches, eventqueue.Batch{TenantID: r.tenant})
			reqs = append(reqs, nil)
		}
		batches[i].Events = appendEvents(batches[i].Events, r.rows)
		reqs[i] = append(reqs[i], r)
		if r.pending != "" { // committed with a pending batch: the append is deduplicated by it
			sp := batches[i].Pending
			if k := len(sp) - 1; k >= 0 && sp[k].ID == r.pending {
				sp[k].N += len(r.rows)
			} else {
				batches[i].Pending = append(sp, eventqueue.Span{ID: r.pending, N: len(r.rows)})
			}
		}
	}
	if len(batches) == 0 {
		return
	}
	now := d.clock.Now()
	if !d.breaker.Allow(now) {
		return // Redis failed a moment ago: the events stay pending for Requeue
	}
	ctx, cancel := context.WithTimeout(ctx, eventqueue.AppendTimeout)
	defer cancel()
	var done settlement
	var heldTenants, failedTenants []uint64
	failed, appended, held := 0, 0, 0
	for i, res := range d.queue.AppendOnce(ctx, now, batches) {
		b := batches[i]
		if res.Err != nil {
			failed += len(b.Events)
			failedTenants = append(failedTenants, b.TenantID)
			d.log.Warn("delivery: queue append failed; the worker will push the events", "tenant_id", b.TenantID, "events", len(b.Events), "err", res.Err)
			continue
		}
		appended += res.Appended
		if res.Held > 0 { // the queue is full, or events wait ahead: these stay pending
			held += res.Held
			heldTenants = append(heldTenants, b.TenantID)
		}
		done.add(b.TenantID, reqs[i], res)
	}
	if failed > 0 {
		d.breaker.Fail(d.clock.Now())
		d.holdBehind(failedTenants)
	}
	d.metrics.Queued(appended)
	d.metrics.Held(held)
	if len(heldTenants) > 0 {
		if err := d.queue.NoteHeld(ctx, heldTenants...); err != nil {
			d.log.Warn("delivery: could not record held tenants; the worker finds them later", "err", err)
		}
	}
	if len(done.marks) > 0 || len(done.batches) > 0 {
		d.unmark(done)
	}
}

// holdBehind sets the hold mark of tenants whose append failed: their events stay pending, and
// an append of their later events, by this process or another that reaches Redis, would put
// those first. Behind the mark the later ones wait, and the re-pusher drains them all in
// order. A Redis this process cannot reach for the mark either is one it cannot append to:
// the others may still, and that is logged.
func (d *Service) holdBehind(tenants []uint64) {
	// Half an append's time: a request whose append timed out is still answered within a
	// second of Redis hanging.
	ctx, cancel := context.WithTimeout(context.Background(), eventqueue.AppendTimeout/2)
	defer cancel()
	if err := d.queue.Hold(ctx, tenants...); err != nil {
		d.log.Warn("delivery: could not hold the later events of tenants whose append failed; other processes may queue theirs first", "tenants", len(tenants), "err", err)
	}
}

// settlement is what the pusher leaves to settle after an append: marks to clear and pending
// batches to delete.
type settlement struct {
	marks   []queuedEvent   // events marked pending one by one, appended
	batches []appendedBatch // pending batches appended, wholly or in part
}

// add records tenant's requests after their append: the first events were appended or in
// the queue before, the last res.Held were held, and the events of the pending batches
// res.Skipped were left to whoever claimed them.
func (s *settlement) add(tenant uint64, reqs []*commitRequest, res eventqueue.Outcome) {
	skipped := map[string]bool{}
	for _, id := range res.Skipped {
		skipped[id] = true
	}
	n := -res.Held // events in the queue: all but the held and the skipped
	for _, r := range reqs {
		if !skipped[r.pending] {
			n += len(r.rows)
		}
	}
	byID := map[string]int{} // pending batch id -> its index in s.batches
	for _, r := range reqs {
		if skipped[r.pending] {
			continue
		}
		k := min(n, len(r.rows)) // r's events in the queue
		n -= k
		if r.pending == "" {
			s.marks = appendQueued(s.marks, tenant, r.rows[:k])
			continue
		}
		i, ok := byID[r.pending]
		if !ok {
			i = len(s.batches)
			byID[r.pending] = i
			s.batches = append(s.batches, appendedBatch{id: r.pending, tenant: tenant})
		}
		b := &s.batches[i]
		b.appended += k
		b.held = appendQueued(b.held, tenant, r.rows[k:])
	}
}

// events is how many events s settles.
func (s *settlement) events() int {
	n := len(s.marks)
	for _, b := range s.batches {
		n += b.appended + len(b.held)
	}
	return n
}

// batchOf is the queue batch of tenant's stored rows, in order.
func batchOf(tenant uint64, rows []models.TrackedEvent) eventqueue.Batch {
	return eventqueue.Batch{TenantID: tenant, Events: appendEvents(make([]eventqueue.Event, 0, len(rows)), rows)}
}

// appendEvents appends the queue events of stored rows to events, in order.
func appendEvents(events []eventqueue.Event, rows []models.TrackedEvent) []eventqueue.Event {
	for i := range rows {
		events = append(events, eventqueue.Event{ID: rows[i].ID, JSON: rows[i].MarshalQueue()})
	}
	return events
}

// appendQueued appends tenant's rows to done, as events whose pending mark is to be cleared.
func appendQueued(done []queuedEvent, tenant uint64, rows []models.TrackedEvent) []queuedEvent {
	for i := range rows {
		done = append(done, queuedEvent{tenant, rows[i].ID})
	}
	return done
}

// unmark schedules settling appended events (clearing their marks, deleting their pending
// batches), batched and off the request path. If the process dies first, Requeue finds them
// pending and AppendOnce skips them.
func (d *Service) unmark(s settlement) {
	select {
	case d.pushed <- s:
	case <-d.stop:
	}
}

func (d *Service) unmarkLoop() {
	defer d.wg.Done()
	ticker := time.NewTicker(unmarkInterval)
	defer ticker.Stop()
	var todo settlement
	n := 0 // events in todo
	add := func(s settlement) {
		todo.marks = append(todo.marks, s.marks...)
		todo.batches = append(todo.batches, s.batches...)
		n += s.events()
	}
	flush := func() {
		for len(todo.marks) > 0 {
			k := min(len(todo.marks), d.events.MarkChunk())
			d.settle(todo.marks[:k])
			todo.marks = todo.marks[k:]
		}
		for len(todo.batches) > 0 {
			k := min(len(todo.batches), settleBatchChunk)
			d.settleBatches(todo.batches[:k])
			todo.batches = todo.batches[k:]
		}
		n = 0
	}
	for {
		select {
		case s := <-d.pushed:
			add(s)
			if n >= unmarkBatchMaxIDs {
				flush()
			}
		case <-ticker.C:
			flush()
		case <-d.stop:
			for {
				select {
				case s := <-d.pushed:
					add(s)
				default:
					flush()
					return
				}
			}
		}
	}
}

// settleBatchChunk is the most pending batches one DELETE carries.
const settleBatchChunk = 500

// settle clears the pending marks of appended events, then acknowledges them to the queue.
func (d *Service) settle(events []queuedEvent) {
	err := d.events.Write(func() error { return unmarkPending(d.events.Pool(context.Background()), events) })
	if err != nil {
		d.log.Warn("delivery: could not clear pending marks; Requeue will find them appended", "events", len(events), "err", err)
		return
	}
	d.ack(events)
}

// ack tells each tenant's queue that these events are no longer pending in the database.
// A failure only keeps their deduplication entries longer (eventqueue.Retention).
func (d *Service) ack(events []queuedEvent) {
	now := d.clock.Now()
	if !d.breaker.Allow(now) {
		return
	}
	byTenant := map[uint64][]string{}
	for _, e := range events {
		byTenant[e.tenant] = append(byTenant[e.tenant], e.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventqueue.AppendTimeout)
	defer cancel()
	for tenant, ids := range byTenant {
		if err := d.queue.ShortenDedup(ctx, now, tenant, ids); err != nil {
			d.log.Warn("delivery: queue ack failed", "tenant_id", tenant, "events", len(ids), "err", err)
			return
		}
	}
}

// unmarkPending clears the pending mark of events.
func unmarkPending(tx eventstore.Tx, events []queuedEvent) error {
	return setPending(tx, events, false)
}

// setPending sets the pending mark of events to pending, one statement per tenant: each is
// routed to the node that holds the tenant on Citus.
func setPending(tx eventstore.Tx, events []queuedEvent, pending bool) error {
	byTenant := map[uint64][]string{}
	var order []uint64
	for _, e := range events {
		if _, seen := byTenant[e.tenant]; !seen {
			order = append(order, e.tenant)
		}
		byTenant[e.tenant] = append(byTenant[e.tenant], e.id)
	}
	for _, t := range order {
		if err := tx.Mark(t, byTenant[t], pending); err != nil {
			return err
		}
	}
	return nil
}
