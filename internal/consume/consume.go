// Package consume is how a tenant's queue is consumed: reads of its front (held while it is
// empty), trims (recorded durably for a rebuild), shared consumption through leases and
// acknowledgements, dead letters, the queue's statistics, and its rebuild after Redis lost it.
// The Redis side of each is one atomic operation of internal/eventqueue; this package adds the
// UseQueueEvents flag, the waiting, and the database. Ingestion (internal/tracking) fills the
// queues.
package consume

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/delivery"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/turns"
	"github.com/eventq/eventq/models"
)

// HeldDrainer appends a tenant's held events to its queue, in order (tracking.Ingestor).
type HeldDrainer interface {
	DrainHeld(ctx context.Context, tenant uint64) (int, error)
}

// Service consumes queues. Every field is required unless its comment says it may be nil.
type Service struct {
	DB *gorm.DB
	// Events is the store of the stored events, for the held-back count and Rebuild.
	Events *eventstore.Store
	Queue  *eventqueue.Store
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
	// TenantReads is how many reads of one tenant's queue this process serves at once: a read
	// holds its turn until its page is released (sent, or its client gone), so a tenant's
	// readers share the api's and Redis's time with every other tenant's instead of taking it.
	// 0 means DefaultTenantReads.
	TenantReads int
	// TenantLeases is how many lease calls of one tenant reach Redis at once from this
	// process; 0 means DefaultTenantLeases.
	TenantLeases int

	reads, leases turns.Turns
}

// DefaultTenantReads is how many reads of one tenant's queue an api process serves at once
// when Service.TenantReads is 0: a tenant's many parallel full reads then queue in its own
// api process instead of taking Redis's time, and the read path's connections, from every
// other tenant.
const DefaultTenantReads = 2

// DefaultTenantLeases is how many lease calls of one tenant an api process lets reach Redis
// at once when Service.TenantLeases is 0.
const DefaultTenantLeases = 4

// openPage opens a page of tenantID's queue once the tenant's turn comes: the page gives the
// turn back when it is released.
func (s *Service) openPage(ctx context.Context, tenantID uint64, limit int) (*eventqueue.Page, error) {
	release, err := s.reads.Wait(ctx, tenantID, s.tenantReads())
	if err != nil {
		return nil, err
	}
	page, err := s.Queue.OpenPage(ctx, tenantID, limit)
	if err != nil {
		release()
		return nil, err
	}
	page.OnRelease(release)
	return page, nil
}

func (s *Service) tenantReads() int {
	if s.TenantReads <= 0 {
		return DefaultTenantReads
	}
	return s.TenantReads
}

func (s *Service) tenantLeases() int {
	if s.TenantLeases <= 0 {
		return DefaultTenantLeases
	}
	return s.TenantLeases
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
	page, err = s.openPage(ctx, tenantID, limit)
	if err != nil || page.Count > 0 || wait <= 0 || s.Waiter == nil {
		return page, true, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		wake, release := s.Waiter.Watch(ctx, tenantID)
		page.Release()
		page, err = s.openPage(ctx, tenantID, limit)
		if err != nil || page.Count > 0 || wake == nil {
			release()
			return page, true, err
		}
		// Empty: the wait holds no turn of the tenant's reads (a long poll would keep one for
		// its whole wait), only the page's offset.
		page = emptied(page)
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

// emptied releases an empty page, which gives its read's turn back, and returns one without
// a turn that answers the same: no events, the same offset.
func emptied(page *eventqueue.Page) *eventqueue.Page {
	offset := page.Offset
	page.Release()
	return &eventqueue.Page{Offset: offset}
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

// Stats returns tenantID's queue statistics; HeldBack is delivery.Held.Back's count.
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
	out.HeldBack, err = s.held().Back(ctx, tenantID)
	return out, err
}

// held is the Store of the service's held events.
func (s *Service) held() *delivery.Held { return &delivery.Held{Events: s.Events, Queue: s.Queue} }
