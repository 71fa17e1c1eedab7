package tracking

import (
	"context"
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
	err = in.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
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
		byTenant := map[uint64][][]byte{}
		var order []uint64
		ids := make([]string, len(rows))
		for i := range rows {
			t := rows[i].TenantID
			if _, seen := byTenant[t]; !seen {
				order = append(order, t)
				byTenant[t] = nil
			}
			byTenant[t] = append(byTenant[t], rows[i].MarshalQueue())
			ids[i] = rows[i].ID
		}
		for _, t := range order {
			active, err := in.flags.Active(ctx, features.UseQueueEvents, t)
			if err != nil {
				return err
			}
			if !active {
				continue
			}
			if err := in.queue.Append(ctx, t, byTenant[t]...); err != nil {
				return err
			}
			pushed += len(byTenant[t])
		}
		if len(ids) == 0 {
			return nil
		}
		return tx.Model(&models.TrackedEvent{}).Where("id IN ?", ids).UpdateColumn("queue_pending", false).Error
	})
	return pushed, more, err
}
