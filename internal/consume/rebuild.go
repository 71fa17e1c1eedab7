package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/tracking"
	"github.com/eventq/eventq/models"
)

// RebuildSettle is how long Rebuild waits, with appends held, for requests in flight when it
// began: one whose append went in just before it emptied the queue clears the event's pending
// mark right after (within the append timeout), and would otherwise undo Rebuild's mark.
const RebuildSettle = 4 * tracking.AppendTimeout

// Rebuild puts the queues of tenants back from the database after Redis lost them (a restart
// without persistence, a failover, FLUSHALL): every stored event that had been queued and not
// trimmed, in acceptance order, with the recorded front offset (see TrimLog). It returns how
// many events it restored, per tenant.
//
// Steps: each tenant's appends are held and its queue emptied (eventqueue.Store.BeginRebuild);
// the events queued after its last recorded trim are marked pending again, and once more after
// RebuildSettle; then the hold is lifted and the pending events are drained in order, as the
// re-pusher drains a full queue, before any event accepted meanwhile. Whatever does not fit
// under the queue's length limit stays pending, held, and goes in as the consumer trims.
func (s *Service) Rebuild(ctx context.Context, tenants ...uint64) (map[uint64]int64, error) {
	restored := map[uint64]int64{}
	fronts := map[uint64]models.QueueFront{}
	for _, t := range tenants {
		var front models.QueueFront
		err := s.DB.WithContext(ctx).Where("tenant_id = ?", t).Take(&front).Error
		if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return restored, fmt.Errorf("consume: rebuild: %w", err)
		}
		fronts[t] = front
		if err := s.Queue.BeginRebuild(ctx, t, front.Front); err != nil {
			return restored, err
		}
	}
	for _, t := range tenants {
		n, err := s.markForRebuild(ctx, t, fronts[t])
		if err != nil {
			return restored, err
		}
		restored[t] = n
	}
	// Real time, not an injected clock: the requests waited for are bounded by real timeouts.
	select {
	case <-time.After(RebuildSettle):
	case <-ctx.Done():
		return restored, ctx.Err()
	}
	for _, t := range tenants {
		if _, err := s.markForRebuild(ctx, t, fronts[t]); err != nil {
			return restored, err
		}
		if err := s.Queue.EndRebuild(ctx, t); err != nil {
			return restored, err
		}
		if _, err := s.Held.DrainHeld(ctx, t); err != nil {
			return restored, err
		}
	}
	return restored, nil
}

// markForRebuild marks pending every event of tenant queued after front, and counts them.
func (s *Service) markForRebuild(ctx context.Context, tenant uint64, front models.QueueFront) (int64, error) {
	q := s.DB.WithContext(ctx).Model(&models.TrackedEvent{}).Where("tenant_id = ? AND queued = ?", tenant, true)
	if front.TrimmedThrough != "" {
		q = q.Where("id > ?", front.TrimmedThrough)
		// Ids sort by time: bound the scan on the (tenant_id, created_at) index.
		if at, ok := s.createdAt(ctx, tenant, front.TrimmedThrough); ok {
			q = q.Where("created_at >= ?", at.Add(-time.Hour))
		}
	}
	res := q.UpdateColumn("queue_pending", true)
	if res.Error != nil {
		return 0, fmt.Errorf("consume: rebuild: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// idTimeSlack is how far from the time in its UUID v7 an event's created_at is looked for
// first: the two are taken from clocks a moment apart.
const idTimeSlack = time.Hour

// createdAt looks up the created_at of tenant's stored event id. It first looks near the time
// in the id (a UUID v7), which on Postgres confines the lookup to that day's partitions, and
// only then everywhere.
func (s *Service) createdAt(ctx context.Context, tenant uint64, id string) (time.Time, bool) {
	var rows []models.TrackedEvent
	q := func() *gorm.DB {
		return s.DB.WithContext(ctx).Select("created_at").Where("tenant_id = ? AND id = ?", tenant, id).Limit(1)
	}
	if u, err := uuid.Parse(id); err == nil && u.Version() == 7 {
		sec, nsec := u.Time().UnixTime()
		at := time.Unix(sec, nsec).UTC()
		if err := q().Where("created_at BETWEEN ? AND ?", at.Add(-idTimeSlack), at.Add(idTimeSlack)).Find(&rows).Error; err == nil && len(rows) == 1 {
			return rows[0].CreatedAt, true
		}
	}
	if err := q().Find(&rows).Error; err == nil && len(rows) == 1 {
		return rows[0].CreatedAt, true
	}
	return time.Time{}, false
}
