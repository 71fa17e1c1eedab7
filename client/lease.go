package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Bounds of the lease, ack and dead-letter calls, as the server enforces them.
const (
	MaxLeaseLimit     = 1000                // most events one Lease returns
	DefaultLeaseLimit = 100                 // ConsumeShared's batch size
	DefaultVisibility = 30 * time.Second    // how long a lease lasts by default
	MaxVisibility     = 43200 * time.Second // the longest lease (12 h)
	MaxAckIDs         = 1000                // most lease ids in one Ack
	MaxDeadLetters    = 1000                // most dead letters one DeadLetters returns
	leasesPath        = eventsPath + "/leases"
	acksPath          = eventsPath + "/acks"
	deadPath          = eventsPath + "/dead-letters"
)

// LeasedEvent is one event handed out by Lease. LeaseID names this delivery in Ack; Offset is
// the event's absolute position in the queue (the numbering of Batch.Offset); Deliveries
// counts how many times the event has been leased, this time included (1 on the first
// delivery).
type LeasedEvent struct {
	LeaseID    string
	Offset     int64
	Deliveries int
	Event      Event
}

// Leases is the answer of one Lease call: the events, lowest offset first, and when their
// leases expire unless extended (on the server's clock). BatchID names every event of the
// answer: AckRequest.Batches acknowledges them all with it. It is "" from a server that has
// no batch acks; acknowledge each lease id then.
type Leases struct {
	Events    []LeasedEvent
	ExpiresAt time.Time
	BatchID   string
}

// Lease leases up to limit events (1–MaxLeaseLimit) of the tenant's queue that no live lease
// holds and that are not acknowledged (POST /api/platform/events/leases). Until the lease
// expires, visibility from now, no other Lease call returns them; then they can be leased
// again, with Deliveries counting up. visibility is rounded up to whole seconds, between 1s
// and MaxVisibility. When nothing is available, the server holds the call up to wait (whole
// seconds, at most MaxWait) for an event to arrive or a lease to expire; the answer may be
// empty. The events stay in the queue until acknowledged with Ack. Lease is not idempotent:
// an answer lost on the way leases events nobody sees until their leases expire.
func (c *Client) Lease(ctx context.Context, limit int, visibility, wait time.Duration) (Leases, error) {
	if limit < 1 || limit > MaxLeaseLimit {
		return Leases{}, fmt.Errorf("lease events: limit must be 1 to %d, got %d", MaxLeaseLimit, limit)
	}
	path := leasesPath + "?limit=" + strconv.Itoa(limit) + "&visibility=" + strconv.Itoa(visibilitySeconds(visibility))
	if secs := int(min(wait, MaxWait) / time.Second); secs > 0 {
		path += "&wait=" + strconv.Itoa(secs)
	}
	body, _, err := c.doJSON(ctx, http.MethodPost, path, nil, http.StatusOK)
	if err != nil {
		return Leases{}, fmt.Errorf("lease events: %w", err)
	}
	var res struct {
		Data []struct {
			LeaseID    string `json:"lease_id"`
			Offset     int64  `json:"offset"`
			Deliveries int    `json:"deliveries"`
			Event      Event  `json:"event"`
		} `json:"data"`
		ExpiresAt time.Time `json:"expires_at"`
		BatchID   string    `json:"batch_id"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return Leases{}, fmt.Errorf("lease events: decode response: %w", err)
	}
	if res.Data == nil || res.ExpiresAt.IsZero() {
		return Leases{}, fmt.Errorf("lease events: malformed response: %.200s", body)
	}
	out := Leases{Events: make([]LeasedEvent, len(res.Data)), ExpiresAt: res.ExpiresAt, BatchID: res.BatchID}
	for i, d := range res.Data {
		if d.LeaseID == "" {
			return Leases{}, fmt.Errorf("lease events: malformed response: an event without lease_id: %.200s", body)
		}
		out.Events[i] = LeasedEvent{LeaseID: d.LeaseID, Offset: d.Offset, Deliveries: d.Deliveries, Event: d.Event}
	}
	return out, nil
}

// visibilitySeconds is d in whole seconds, rounded up, within the server's bounds.
func visibilitySeconds(d time.Duration) int {
	if d <= 0 {
		d = DefaultVisibility
	}
	return int(min((d+time.Second-1)/time.Second, MaxVisibility/time.Second))
}

// AckRequest settles leases in one Ack call: Acks are done, Retries are handed back to be
// leased again at once, Extends last Visibility more from now (rounded up to whole seconds;
// zero means DefaultVisibility). Batches are batch ids (Leases.BatchID): every event of each
// not yet acknowledged is done, as if each of its lease ids were in Acks. At most MaxAckIDs
// ids in all, a batch id counting as one.
type AckRequest struct {
	Acks, Retries, Extends []string
	Batches                []string
	Visibility             time.Duration
}

// AckStatus is the server's outcome for one lease id of an Ack.
type AckStatus string

// The outcomes of an Ack, per lease id.
const (
	// StatusAcked: the event is done. An ack is honoured even after the lease expired or the
	// event was leased again.
	StatusAcked AckStatus = "acked"
	// StatusAlreadyAcked: the event was acknowledged before (by this or another consumer).
	StatusAlreadyAcked AckStatus = "already_acked"
	// StatusRetried: the lease ended; the event can be leased again at once.
	StatusRetried AckStatus = "retried"
	// StatusExtended: the lease now expires the request's visibility from now.
	StatusExtended AckStatus = "extended"
	// StatusExpired: a retry or extend of a lease that is no longer the event's current one
	// (it expired, or the event was leased again); the event may be with another consumer.
	StatusExpired AckStatus = "expired"
	// StatusTrimmed: the event left the queue by a DELETE, or went to the dead letters.
	StatusTrimmed AckStatus = "trimmed"
	// StatusUnknown: not a lease id of this tenant (e.g. issued before a queue rebuild).
	StatusUnknown AckStatus = "unknown"
)

// AckResult is the outcome for one lease id, or for one batch id: then LeaseID is "",
// BatchID names it, Status is StatusAcked or StatusUnknown (not a batch of this tenant, one
// issued before a queue rebuild, or one whose events leased again were forgotten after a day)
// and Acked counts the events this call acknowledged.
type AckResult struct {
	LeaseID string
	BatchID string
	Status  AckStatus
	Acked   int
}

// Ack acknowledges, retries and extends leases, and acknowledges batches, in one atomic call
// (POST /api/platform/events/acks) and returns one result per id: acks, then retries, then
// extends, then batches, each in request order. Acknowledged events at the front of the queue
// leave it at once. Ack is safe to repeat after an error whose outcome is unknown: a repeated
// ack answers already_acked, a repeated batch acked with Acked 0, a repeated retry expired, a
// repeated extend extends again.
func (c *Client) Ack(ctx context.Context, req AckRequest) ([]AckResult, error) {
	n := len(req.Acks) + len(req.Retries) + len(req.Extends) + len(req.Batches)
	if n > MaxAckIDs {
		return nil, fmt.Errorf("ack leases: at most %d ids, got %d", MaxAckIDs, n)
	}
	if n == 0 {
		return []AckResult{}, nil
	}
	in := struct {
		Acks       []string `json:"acks,omitempty"`
		Retries    []string `json:"retries,omitempty"`
		Extends    []string `json:"extends,omitempty"`
		Batches    []string `json:"batches,omitempty"`
		Visibility int      `json:"visibility"`
	}{req.Acks, req.Retries, req.Extends, req.Batches, visibilitySeconds(req.Visibility)}
	payload, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("ack leases: %w", err)
	}
	body, _, err := c.doJSON(ctx, http.MethodPost, acksPath, payload, http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("ack leases: %w", err)
	}
	var res struct {
		Data []struct {
			LeaseID string    `json:"lease_id"`
			BatchID string    `json:"batch_id"`
			Status  AckStatus `json:"status"`
			Acked   int       `json:"acked"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("ack leases: decode response: %w", err)
	}
	if len(res.Data) != n {
		return nil, fmt.Errorf("ack leases: %d statuses for %d ids: %.200s", len(res.Data), n, body)
	}
	out := make([]AckResult, n)
	for i, d := range res.Data {
		out[i] = AckResult{LeaseID: d.LeaseID, BatchID: d.BatchID, Status: d.Status, Acked: d.Acked}
	}
	return out, nil
}

// AckBatch acknowledges every event of leases not yet acknowledged and returns how many this
// call acknowledged: with the batch id alone, or, when the server has no batch acks or does
// not know the batch (StatusUnknown), with every lease id. Like Ack it is safe to repeat.
func (c *Client) AckBatch(ctx context.Context, leases Leases) (int, error) {
	if len(leases.Events) == 0 {
		return 0, nil
	}
	if leases.BatchID != "" {
		res, err := c.Ack(ctx, AckRequest{Batches: []string{leases.BatchID}})
		if err != nil {
			return 0, err
		}
		if res[0].Status == StatusAcked {
			return res[0].Acked, nil
		}
		c.log.InfoContext(ctx, "eventq client: batch unknown to the server, acknowledging its leases one by one", "batch_id", leases.BatchID)
	}
	ids := make([]string, len(leases.Events))
	for i, e := range leases.Events {
		ids[i] = e.LeaseID
	}
	res, err := c.Ack(ctx, AckRequest{Acks: ids})
	if err != nil {
		return 0, err
	}
	c.logSettled(ctx, res)
	n := 0
	for _, r := range res {
		if r.Status == StatusAcked {
			n++
		}
	}
	return n, nil
}

// DeadLetter is an event that was leased EVENTQUEUE_MAX_DELIVERIES times without being
// acknowledged: Offset was its position in the queue, Deliveries how often it was leased.
type DeadLetter struct {
	Offset     int64
	Deliveries int
	Event      Event
}

// DeadLetters returns up to limit (1–MaxDeadLetters) of the tenant's dead letters, oldest
// first (GET /api/platform/events/dead-letters). It removes nothing.
func (c *Client) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	if limit < 1 || limit > MaxDeadLetters {
		return nil, fmt.Errorf("read dead letters: limit must be 1 to %d, got %d", MaxDeadLetters, limit)
	}
	body, _, err := c.do(ctx, http.MethodGet, deadPath+"?limit="+strconv.Itoa(limit), http.StatusOK)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	var res struct {
		Data []struct {
			Offset     int64 `json:"offset"`
			Deliveries int   `json:"deliveries"`
			Event      Event `json:"event"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("read dead letters: decode response: %w", err)
	}
	if res.Data == nil {
		return nil, fmt.Errorf("read dead letters: malformed response: %.200s", body)
	}
	out := make([]DeadLetter, len(res.Data))
	for i, d := range res.Data {
		out[i] = DeadLetter{Offset: d.Offset, Deliveries: d.Deliveries, Event: d.Event}
	}
	return out, nil
}

// DropDeadLetters removes the oldest count dead letters
// (DELETE /api/platform/events/dead-letters?count=N). Like Trim it is not idempotent: read
// them again with DeadLetters before repeating one whose outcome is unknown.
func (c *Client) DropDeadLetters(ctx context.Context, count int) error {
	if count < 1 {
		return fmt.Errorf("drop dead letters: count must be at least 1, got %d", count)
	}
	if _, _, err := c.do(ctx, http.MethodDelete, deadPath+"?count="+strconv.Itoa(count), http.StatusNoContent); err != nil {
		return fmt.Errorf("drop dead letters: %w", err)
	}
	return nil
}
