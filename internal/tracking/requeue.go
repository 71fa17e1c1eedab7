package tracking

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/models"
)

// RequeueMinAge is how old a pending event must be before Requeue pushes it. The API clears
// the mark right after its own append; waiting this long keeps Requeue from racing an
// in-flight request, so only a failed append or a crash leads to a push by the worker.
const RequeueMinAge = 30 * time.Second

const requeueBatch = 500

// Requeue pushes stored events that are still marked pending and older than minAge to their
// tenants' queues, oldest first, and clears the mark. Events of a tenant whose flag has been
// switched off since are unmarked without a push. Concurrent callers on Postgres skip each
// other's rows. It returns how many events it pushed.
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
	// On Postgres the rows are locked (SKIP LOCKED) for the duration, so concurrent workers
	// share the backlog. SQLite has one writer for the whole database: holding its write lock
	// across Redis round trips would stall ingestion, so there the rows are read and unmarked
	// in separate short statements (a second worker may then push a row twice).
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
		var done []string
		for _, t := range order {
			active, err := in.flags.Active(ctx, features.UseQueueEvents, t)
			if err != nil {
				pushErr = err
				continue
			}
			if active {
				payloads := make([][]byte, len(byTenant[t]))
				for i, ev := range byTenant[t] {
					payloads[i] = ev.MarshalQueue()
				}
				if err := in.queue.Append(ctx, t, payloads...); err != nil {
					pushErr = err
					continue
				}
				pushed += len(payloads)
				in.metrics.Queued(len(payloads))
			}
			for _, ev := range byTenant[t] {
				done = append(done, ev.ID)
			}
		}
		if len(done) > 0 {
			if err := tx.Model(&models.TrackedEvent{}).Where("id IN ?", done).UpdateColumn("queue_pending", false).Error; err != nil {
				return fmt.Errorf("tracking: requeue: unmark: %w", err)
			}
		}
		if pushErr != nil {
			more = false
		}
		return nil
	})
	if err == nil {
		err = pushErr
	}
	return pushed, more, err
}
