// Package consume is how a tenant's queue is consumed: reads of its front (held while it is
// empty), trims (recorded durably for a rebuild), shared consumption through leases and
// acknowledgements, dead letters, the queue's statistics, and its rebuild after Redis lost it.
// The Redis side of each is one atomic operation of internal/eventqueue; this package adds the
// UseQueueEvents flag, the waiting, and the database. Ingestion (internal/tracking) fills the
// queues.
package consume

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/models"
)

// HeldDrainer appends a tenant's held events to its queue, in order (tracking.Ingestor).
type HeldDrainer interface {
	DrainHeld(ctx context.Context, tenant uint64) (int, error)
}

// Service consumes queues. Every field is required unless its comment says it may be nil.
type Service struct {
	DB    *gorm.DB
	Queue *eventqueue.Store
	// Queueing says which tenants' events are queued (UseQueueEvents).
	Queueing features.Queueing
	// Waiter holds reads and lease calls until an event arrives; nil answers them at once.
	Waiter *eventqueue.Waiter
	// Trims records each trim's new front durably, for Rebuild; may be nil.
	Trims *TrimLog
	// Held drains held events at the end of a Rebuild; only Rebuild needs it.
	Held HeldDrainer
	// Clock stamps the expiry a lease call reports when the tenant's events are not queued
	// (leases that are made carry Redis's time); nil means the system clock.
	Clock clock.Clock
	// MaxDeliveries is how many times an event is leased before it goes to the dead letters
	// (EVENTQUEUE_MAX_DELIVERIES); 0 means 10.
	MaxDeliveries int64
	// Dead bounds each tenant's dead letters (EVENTQUEUE_MAX_DEAD_LETTERS,
	// DEAD_LETTER_RETENTION); the zero value means the defaults.
	Dead eventqueue.DeadPolicy
	// Metrics counts leases and dead letters; may be nil.
	Metrics *metrics.Metrics
}

// Read returns up to limit events from the front of tenantID's queue without removing them,
// with the front offset (see eventqueue.Store.OpenPage: the page's events may still be
// arriving); the caller releases the page. When the queue is empty and wait > 0, it waits for
// the tenant's next append (or wait, or ctx, or the Waiter's closing) and reads again. active
// is false when the tenant's events are not queued: the page is then empty, after wait.
func (s *Service) Read(ctx context.Context, tenantID uint64, limit int, wait time.Duration) (page *eventqueue.Page, active bool, err error) {
	if active, err = s.Queueing.Queues(ctx, tenantID); err != nil || !active {
		if err == nil && wait > 0 { // nothing will arrive: answer when the wait is over
			s.hold(ctx, wait)
		}
		return &eventqueue.Page{}, false, err
	}
	page, err = s.Queue.OpenPage(ctx, tenantID, limit)
	if err != nil || page.Count > 0 || wait <= 0 || s.Waiter == nil {
		return page, true, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		wake, release := s.Waiter.Watch(ctx, tenantID)
		page.Release()
		page, err = s.Queue.OpenPage(ctx, tenantID, limit)
		if err != nil || page.Count > 0 || wake == nil {
			release()
			return page, true, err
		}
		select {
		case <-wake:
			release()
		case <-deadline.C:
			release()
			return page, true, nil
		case <-ctx.Done():
			release()
			return page, true, nil
		}
	}
}

func (s *Service) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

// hold waits d, or until ctx is done or the Waiter closes.
func (s *Service) hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	var stop <-chan struct{}
	if s.Waiter != nil {
		stop = s.Waiter.Closing()
	}
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-stop:
	}
}

// Trim removes the first count events of tenantID's queue, or with offset ≥ 0 those up to
// absolute position offset+count still there (idempotent; see eventqueue.Store.Trim, whose
// *eventqueue.ErrOffsetAhead it returns), ends their leases and records the new front in the
// trim log. active is false, and nothing is done, when the tenant's events are not queued.
func (s *Service) Trim(ctx context.Context, tenantID uint64, count, offset int64) (trimmed eventqueue.Trimmed, active bool, err error) {
	if active, err = s.Queueing.Queues(ctx, tenantID); err != nil || !active {
		return eventqueue.Trimmed{}, false, err
	}
	trimmed, err = s.Queue.Trim(ctx, tenantID, count, offset)
	if err != nil {
		return trimmed, true, err
	}
	s.record(tenantID, trimmed)
	return trimmed, true, nil
}

func (s *Service) record(tenantID uint64, trimmed eventqueue.Trimmed) {
	if s.Trims != nil {
		s.Trims.Record(tenantID, trimmed)
	}
}

// Stats is what queue stats prints.
type Stats struct {
	TenantID string `json:"tenant_id"`
	// Length is how many events the queue holds.
	Length int64 `json:"length"`
	// Offset is the queue's front offset: how many events were ever trimmed.
	Offset int64 `json:"offset"`
	// HeldBack is how many stored events are to be queued but are not in the queue.
	HeldBack int64 `json:"held_back"`
	// Leased is how many events are under a live lease.
	Leased int64 `json:"leased"`
	// DeadLetters is how many dead letters the tenant has.
	DeadLetters int64 `json:"dead_letters"`
}

// heldPage is how many pending rows Stats checks against the queue at a time.
const heldPage = 5000

// markPage is how many marked events Stats checks against the queue at a time (heldPage; the
// tests make it small to cross pages).
var markPage = heldPage

// Stats returns tenantID's queue statistics. HeldBack counts the stored events marked pending,
// or in a pending batch, that are not in the queue: a marked event already appended (its mark
// is cleared just after the append) is recognised by its entry in the queue's deduplication
// set, and a pending batch's appended events by its record (eventqueue.PendingAppended), so a
// busy healthy tenant shows only the events of the batches not appended yet.
//
// The pending batches are counted first, then the marks. Settling a batch deletes it and marks
// its held events in one transaction, at any moment: a batch settled before its turn is
// counted through its marks, one settled after the marks were read through itself, and one
// settled between the two readings is counted through itself, its events then skipped among
// the marks. (Read the other way round, a batch settled in between was counted nowhere.)
func (s *Service) Stats(ctx context.Context, tenantID uint64) (Stats, error) {
	out := Stats{TenantID: models.FormatID(tenantID)}
	var err error
	if out.Length, err = s.Queue.Len(ctx, tenantID); err != nil {
		return out, err
	}
	if out.Offset, err = s.Queue.Offset(ctx, tenantID); err != nil {
		return out, err
	}
	if out.Leased, out.DeadLetters, err = s.Queue.LeaseCounts(ctx, tenantID, s.Dead); err != nil {
		return out, err
	}
	inBatches, counted, err := s.heldInBatches(ctx, tenantID)
	if err != nil {
		return out, err
	}
	if betweenStatsReads != nil {
		betweenStatsReads()
	}
	marked, err := s.heldMarked(ctx, tenantID, counted)
	if err != nil {
		return out, err
	}
	out.HeldBack = inBatches + marked
	return out, nil
}

// betweenStatsReads, when set (by a test), runs after Stats has read the pending batches and
// before it reads the marks.
var betweenStatsReads func()

// heldInBatches counts the events of tenantID's pending batches that are not in the queue, and
// returns the ids of the events of the batches it counted.
func (s *Service) heldInBatches(ctx context.Context, tenantID uint64) (int64, map[string]bool, error) {
	var held int64
	counted := map[string]bool{}
	count := func(b *models.PendingBatch, n int64) {
		held += n
		for _, id := range b.Events() {
			counted[id] = true
		}
	}
	after := ""
	for {
		var batches []models.PendingBatch
		err := s.DB.WithContext(ctx).Select("id", "event_ids").Where("tenant_id = ? AND id > ?", tenantID, after).
			Order("id").Limit(heldPage / 100).Find(&batches).Error
		if err != nil {
			return 0, nil, fmt.Errorf("consume: count held back events: %w", err)
		}
		ids := make([]string, len(batches))
		for i, b := range batches {
			ids[i] = b.ID
		}
		// An appended batch's record says how many of its events went in (the first ones);
		// without one, none did yet, or the batch was settled meanwhile.
		recorded, err := s.Queue.PendingAppended(ctx, tenantID, ids...)
		if err != nil {
			return 0, nil, err
		}
		unrecorded := map[string]*models.PendingBatch{}
		for i := range batches {
			b := &batches[i]
			n, ok := recorded[b.ID]
			if !ok {
				unrecorded[b.ID] = b
				continue
			}
			count(b, max(int64(b.Len())-max(n, 0), 0))
		}
		if len(unrecorded) > 0 { // a batch settled meanwhile was deleted before its record
			var still []string
			err := s.DB.WithContext(ctx).Model(&models.PendingBatch{}).Where("id IN ?", slices.Collect(maps.Keys(unrecorded))).Pluck("id", &still).Error
			if err != nil {
				return 0, nil, fmt.Errorf("consume: count held back events: %w", err)
			}
			for _, id := range still {
				b := unrecorded[id]
				count(b, int64(b.Len()))
			}
		}
		if len(batches) < heldPage/100 {
			return held, counted, nil
		}
		after = batches[len(batches)-1].ID
	}
}

// heldMarked counts tenantID's events marked pending that are not in the queue, but for those
// in skip.
func (s *Service) heldMarked(ctx context.Context, tenantID uint64, skip map[string]bool) (int64, error) {
	var held int64
	var afterAt time.Time // the last page's last marked event, in the order of models.PendingIndex
	afterID := ""
	for {
		var rows []struct {
			ID        string
			CreatedAt time.Time
		}
		q := s.DB.WithContext(ctx).Model(&models.TrackedEvent{}).Select("id", "created_at").
			Where("queue_pending AND tenant_id = ?", tenantID) // models.PendingIndex, in its order
		if afterID != "" {
			q = q.Where("(created_at, id) > (?, ?)", afterAt, afterID)
		}
		if err := q.Order("created_at, id").Limit(markPage).Scan(&rows).Error; err != nil {
			return 0, fmt.Errorf("consume: count held back events: %w", err)
		}
		if len(rows) == 0 {
			return held, nil
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		in, err := s.Queue.Appended(ctx, tenantID, ids)
		if err != nil {
			return 0, err
		}
		for i, queued := range in {
			if !queued && !skip[ids[i]] {
				held++
			}
		}
		if len(rows) < markPage {
			return held, nil
		}
		afterAt, afterID = rows[len(rows)-1].CreatedAt, rows[len(rows)-1].ID
	}
}
