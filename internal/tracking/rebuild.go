package tracking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// Rebuild puts tenantID's queue back from the database after Redis lost it (a restart without
// persistence, a failover, FLUSHALL): every stored event that had been queued and not trimmed,
// in acceptance order, with the recorded front offset (see TrimLog). It returns how many
// events it restored.
//
// Steps: the tenant's appends are held and its queue emptied (eventqueue.Store.BeginRebuild);
// the events queued after the last recorded trim are marked pending again; then the lock is
// lifted and the pending events are drained in order, as the re-pusher drains a full queue,
// before any event accepted meanwhile. Whatever does not fit under the queue's length limit
// stays pending, held, and goes in as the consumer trims.
func (in *Ingestor) Rebuild(ctx context.Context, tenantID uint64) (int64, error) {
	var front models.QueueFront
	err := in.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Take(&front).Error
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, fmt.Errorf("tracking: rebuild: %w", err)
	}
	if err := in.queue.BeginRebuild(ctx, tenantID, front.Front); err != nil {
		return 0, err
	}
	q := in.db.WithContext(ctx).Model(&models.TrackedEvent{}).Where("tenant_id = ? AND queued = ?", tenantID, true)
	if front.TrimmedThrough != "" {
		q = q.Where("id > ?", front.TrimmedThrough)
		// Ids sort by time: bound the scan on the (tenant_id, created_at) index.
		var last models.TrackedEvent
		if err := in.db.WithContext(ctx).Select("created_at").Where("id = ?", front.TrimmedThrough).Take(&last).Error; err == nil {
			q = q.Where("created_at >= ?", last.CreatedAt.Add(-time.Hour))
		}
	}
	res := q.UpdateColumn("queue_pending", true)
	if res.Error != nil {
		return 0, fmt.Errorf("tracking: rebuild: %w", res.Error)
	}
	restored := res.RowsAffected
	if err := in.queue.EndRebuild(ctx, tenantID); err != nil {
		return restored, err
	}
	if _, err := in.drainHeld(ctx, tenantID, map[uint64]bool{}); err != nil {
		return restored, err
	}
	return restored, nil
}
