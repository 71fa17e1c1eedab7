package tracking

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/models"
)

// RequeueMinAge is how old a pending event must be before Requeue pushes it. The API clears
// the mark right after its own append; waiting this long keeps Requeue from doing the work of
// an in-flight request, so only a failed append or a crash leads to a push by the worker.
// (Pushing such an event would not queue it twice: appends are deduplicated.)
const RequeueMinAge = 30 * time.Second

// requeueAppendBy bounds the time from reading a batch of pending events to appending it:
// an event whose pending mark another process cleared meanwhile must still find its
// deduplication entry, which lives eventqueue.AckGrace after that.
const requeueAppendBy = eventqueue.AckGrace / 2

const requeueBatch = 500

// Requeue pushes stored events that are still marked pending and older than minAge to their
// tenants' queues, oldest first, and clears the mark. Events of a tenant whose flag has been
// switched off since are unmarked without a push. Events already in their queue (the process
// that appended them died before clearing the mark) are not appended again. Concurrent
// callers on Postgres skip each other's rows. It returns how many events it pushed.
func (in *Ingestor) Requeue(ctx context.Context, minAge time.Duration) (int, error) {
	total := 0
	for {
		n, more, err := in.requeueBatch(ctx, in.clock.Now().UTC().Add(-minAge))
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

func (in *Ingestor) requeueBatch(ctx context.Context, cutoff time.Time) (pushed int, more bool, err error) {
	var pushErr error
	var done []queuedEvent // pushed (or no longer wanted) and unmarked once run commits
	// On Postgres the rows are locked (SKIP LOCKED) for the duration, so concurrent workers
	// share the backlog. SQLite has one writer for the whole database: holding its write lock
	// across Redis round trips would stall ingestion, so there the rows are read and unmarked
	// in separate short statements (a second worker may then push a row again, which the
	// queue's deduplication turns into a no-op).
	run := in.db.WithContext(ctx).Transaction
	if !database.IsPostgres(in.db) {
		run = func(f func(*gorm.DB) error, _ ...*sql.TxOptions) error { return f(in.db.WithContext(ctx)) }
	}
	err = run(func(tx *gorm.DB) error {
		q := tx.Where("queue_pending = ? AND created_at < ?", true, cutoff).
			Order("created_at, id").Limit(requeueBatch)
		if database.IsPostgres(tx) {
			q = q.Clauses(clause.Locking{Strength: "UPDATE", Options: "SKIP LOCKED"})
		}
		var rows []models.TrackedEvent
		if err := q.Find(&rows).Error; err != nil {
			return fmt.Errorf("tracking: requeue: load: %w", err)
		}
		appendCtx, cancel := context.WithTimeout(ctx, requeueAppendBy)
		defer cancel()
		more = len(rows) == requeueBatch
		byTenant := map[uint64][]*models.TrackedEvent{}
		var order []uint64
		for i := range rows {
			t := rows[i].TenantID
			if _, seen := byTenant[t]; !seen {
				order = append(order, t)
			}
			byTenant[t] = append(byTenant[t], &rows[i])
		}
		// Each tenant's events are pushed and unmarked together; a tenant whose push fails
		// stays pending without undoing the others (which would push those twice).
		for _, t := range order {
			active, err := in.flags.Active(ctx, features.UseQueueEvents, t)
			if err != nil {
				pushErr = err
				continue
			}
			if active {
				b := eventqueue.Batch{TenantID: t, Events: make([]eventqueue.Event, len(byTenant[t]))}
				for i, ev := range byTenant[t] {
					b.Events[i] = eventqueue.Event{ID: ev.ID, JSON: ev.MarshalQueue()}
				}
				res := in.queue.AppendOnce(appendCtx, in.clock.Now(), []eventqueue.Batch{b})[0]
				if res.Err != nil {
					pushErr = res.Err
					continue
				}
				pushed += res.Appended
				in.metrics.Queued(res.Appended)
			}
			for _, ev := range byTenant[t] {
				done = append(done, queuedEvent{t, ev.ID})
			}
		}
		if len(done) > 0 {
			ids := make([]string, len(done))
			for i, e := range done {
				ids[i] = e.id
			}
			if err := tx.Model(&models.TrackedEvent{}).Where("id IN ?", ids).UpdateColumn("queue_pending", false).Error; err != nil {
				return fmt.Errorf("tracking: requeue: unmark: %w", err)
			}
		}
		if pushErr != nil {
			more = false
		}
		return nil
	})
	if err == nil {
		in.ack(done)
		err = pushErr
	}
	return pushed, more, err
}
