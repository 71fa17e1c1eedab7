package consume

import (
	"context"
	"encoding/json"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/models"
)

// DefaultMaxDeliveries is MaxDeliveries when it is not set.
const DefaultMaxDeliveries = 10

func (s *Service) maxDeliveries() int64 {
	if s.MaxDeliveries <= 0 {
		return DefaultMaxDeliveries
	}
	return s.MaxDeliveries
}

// LeaseRequest is one lease call.
type LeaseRequest struct {
	Limit      int           // most events, 1–1000
	Visibility time.Duration // how long the leases last
	Wait       time.Duration // how long to wait for an event when none is available
}

// Leases is what a lease call handed out.
type Leases struct {
	Events    []eventqueue.Leased
	ExpiresAt time.Time
	BatchID   string // acknowledges every event of Events at once
}

// minLeasePoll bounds how often a waiting lease call looks again for leases that expire.
const minLeasePoll = 20 * time.Millisecond

// Lease leases up to req.Limit events of tenantID's queue (see eventqueue.Store.Lease). When
// none is available and req.Wait > 0, it waits until an event is appended or retried, a lease
// expires, or the wait is over (or ctx, or the Waiter's closing), and tries again. Events that
// went to the dead letters on the way are trimmed from the front as acknowledged, recorded
// like any trim. With the tenant's events not queued, nothing is leased.
func (s *Service) Lease(ctx context.Context, tenantID uint64, req LeaseRequest) (Leases, error) {
	active, err := s.Queueing.Queues(ctx, tenantID)
	if err != nil {
		return Leases{}, err
	}
	if !active {
		if req.Wait > 0 {
			s.hold(ctx, req.Wait)
		}
		return Leases{Events: []eventqueue.Leased{}, ExpiresAt: s.now().Add(req.Visibility).UTC(), BatchID: eventqueue.NoBatchID}, nil
	}
	deadline := time.Now().Add(req.Wait)
	lease := func() (eventqueue.LeaseResult, error) {
		release, err := s.leases.Wait(ctx, tenantID, s.tenantLeases())
		if err != nil {
			return eventqueue.LeaseResult{}, err
		}
		defer release()
		res, err := s.Queue.Lease(ctx, tenantID, eventqueue.LeaseArgs{
			Limit: req.Limit, Visibility: req.Visibility, MaxDeliveries: s.maxDeliveries(), Wait: time.Until(deadline),
			Dead: s.Dead,
		})
		if err == nil {
			s.record(tenantID, res.Trimmed)
			s.Metrics.Leased(tenantID, int64(len(res.Events)), res.Redelivered, res.Live, res.DeadAdded, res.DeadDropped)
		}
		return res, err
	}
	res, err := lease()
	if err != nil || len(res.Events) > 0 || req.Wait <= 0 || s.Waiter == nil {
		return leasesOf(res), err
	}
	for {
		wake, release := s.Waiter.Watch(ctx, tenantID)
		res, err = lease()
		left := time.Until(deadline)
		if err != nil || len(res.Events) > 0 || wake == nil || left <= 0 {
			release()
			return leasesOf(res), err
		}
		if !res.NextExpiry.IsZero() {
			left = min(left, max(time.Until(res.NextExpiry)+time.Millisecond, minLeasePoll))
		}
		t := time.NewTimer(left)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		case <-s.Waiter.Closing():
		}
		t.Stop()
		release()
		if ctx.Err() != nil || isClosed(s.Waiter.Closing()) {
			return leasesOf(res), nil
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func leasesOf(res eventqueue.LeaseResult) Leases {
	out := Leases{Events: res.Events, ExpiresAt: res.ExpiresAt, BatchID: res.BatchID}
	if out.Events == nil {
		out.Events = []eventqueue.Leased{}
	}
	return out
}

// AckRequest is one acknowledgement call: lease ids to acknowledge, retry and extend, and
// batch ids to acknowledge.
type AckRequest struct {
	Acks, Retries, Extends []string
	Batches                []string
	Visibility             time.Duration // extensions last this long from now
}

// AckStatus is the outcome for one lease id, or for one batch id (Batch): how many events it
// acknowledged when its Status is acked.
type AckStatus struct {
	ID     string
	Batch  bool
	Status string
	Acked  int64
}

// MarshalJSON is the contract's entry: {"lease_id","status"}, or {"batch_id","status","acked"}
// ({"batch_id","status"} when unknown).
func (a AckStatus) MarshalJSON() ([]byte, error) {
	switch {
	case !a.Batch:
		return json.Marshal(struct {
			LeaseID string `json:"lease_id"`
			Status  string `json:"status"`
		}{a.ID, a.Status})
	case a.Status == eventqueue.StatusAcked:
		return json.Marshal(struct {
			BatchID string `json:"batch_id"`
			Status  string `json:"status"`
			Acked   int64  `json:"acked"`
		}{a.ID, a.Status, a.Acked})
	default:
		return json.Marshal(struct {
			BatchID string `json:"batch_id"`
			Status  string `json:"status"`
		}{a.ID, a.Status})
	}
}

// Ack applies req to tenantID's leases atomically and returns a status per id: acks, then
// retries, then extends, then batches, each in request order (see eventqueue.Store.Settle).
// Acknowledged events at the front of the queue are trimmed, recorded like any trim. With the
// tenant's events not queued, every id is unknown.
func (s *Service) Ack(ctx context.Context, tenantID uint64, req AckRequest) ([]AckStatus, error) {
	var items []eventqueue.AckItem
	for _, group := range []struct {
		kind eventqueue.AckKind
		ids  []string
	}{{eventqueue.KindAck, req.Acks}, {eventqueue.KindRetry, req.Retries}, {eventqueue.KindExtend, req.Extends}, {eventqueue.KindBatch, req.Batches}} {
		for _, id := range group.ids {
			items = append(items, eventqueue.AckItem{Kind: group.kind, LeaseID: id})
		}
	}
	out := make([]AckStatus, len(items))
	for i, it := range items {
		out[i] = AckStatus{ID: it.LeaseID, Batch: it.Kind == eventqueue.KindBatch, Status: eventqueue.StatusUnknown}
	}
	if len(items) == 0 {
		return out, nil
	}
	active, err := s.Queueing.Queues(ctx, tenantID)
	if err != nil || !active {
		return out, err
	}
	settled, trimmed, err := s.Queue.Settle(ctx, tenantID, items, req.Visibility)
	if err != nil {
		return nil, err
	}
	s.record(tenantID, trimmed)
	for i := range out {
		out[i].Status, out[i].Acked = settled[i].Status, settled[i].Acked
	}
	return out, nil
}

// DeadLetters returns up to limit of tenantID's dead letters, oldest first, each the JSON
// {"offset","deliveries","event"}: only those the Dead policy keeps (it drops the others).
func (s *Service) DeadLetters(ctx context.Context, tenantID uint64, limit int) ([]string, error) {
	letters, dropped, err := s.Queue.DeadLetters(ctx, tenantID, limit, s.Dead)
	s.Metrics.DeadDropped(dropped)
	return letters, err
}

// DropDeadLetters removes tenantID's oldest count dead letters.
func (s *Service) DropDeadLetters(ctx context.Context, tenantID uint64, count int64) error {
	return s.Queue.DropDeadLetters(ctx, tenantID, count)
}

// PruneDeadLetters applies the Dead policy to every tenant's dead letters (reads, counts and
// lease calls apply it to the tenant they touch; this reaches the tenants no one looks at) and
// returns how many went.
func (s *Service) PruneDeadLetters(ctx context.Context) (int64, error) {
	var total int64
	for after := uint64(0); ; {
		var ids []uint64
		if err := s.DB.WithContext(ctx).Model(&models.Tenant{}).Where("id > ?", after).Order("id").Limit(500).Pluck("id", &ids).Error; err != nil {
			return total, err
		}
		for _, id := range ids {
			dropped, _, err := s.Queue.PruneDeadLetters(ctx, id, s.Dead)
			if err != nil {
				return total, err
			}
			s.Metrics.DeadDropped(dropped)
			total += dropped
		}
		if len(ids) < 500 {
			return total, nil
		}
		after = ids[len(ids)-1]
	}
}
