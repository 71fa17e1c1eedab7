package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// RebuildSettle is how long Rebuild waits, with appends held, for requests in flight when it
// began: one whose append went in just before it emptied the queue clears the event's pending
// mark right after (within the append timeout), and would otherwise undo Rebuild's mark.
const RebuildSettle = 4 * eventqueue.AppendTimeout

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
		n, err := s.held().MarkUntrimmed(ctx, t, fronts[t])
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
		if _, err := s.held().MarkUntrimmed(ctx, t, fronts[t]); err != nil {
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
