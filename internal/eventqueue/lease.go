package eventqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Shared consumption. A tenant's queue may be consumed by several processes at once through
// leases: each lease call hands out events of the queue that no live lease holds and that are
// not acknowledged, and an acknowledgement marks an event done. Leases live in Redis beside
// the queue, in the tenant's slot, and every change is one script, so any api process answers
// any call, on a single Redis or a cluster. The state, per tenant:
//
//   - LeaseRangesKey, LeaseRangeStartKey, LeaseRangeExpiryKey, LeaseRangeHeldKey: the
//     events leased for the first time, one range per lease call (lease_ranges.go): the
//     first offset, the end, the nonce, the expiry and how many of its events are
//     acknowledged; the held key counts the ranges' events not acknowledged. Every other
//     lease (an event leased again, or of a range that was split) is an event's own:
//   - LeaseStateKey: hash offset → "deliveries:nonce" of every such event leased and not yet
//     acknowledged (nonce names the lease call that holds it now);
//   - LeaseExpiryKey: sorted set of the same offsets by lease expiry (Unix ms; 0 after a
//     retry). Members whose score has passed are reclaimable; the next lease call takes them
//     before any new event, so the set never holds more than MaxLeased members;
//   - LeaseNextKey: the lowest offset never leased: new events are leased from there on;
//   - AckedKey: offsets acknowledged (or dead) still in the queue, behind an unacknowledged
//     one; the acknowledged front is trimmed by the script that acknowledges it;
//   - GoneKey: offsets that left by a trim while leased, or went to the dead letters, by time,
//     for GoneRetention: their lease ids answer "trimmed";
//   - LeaseEpochKey: a random string, part of every lease id, replaced by a rebuild: lease ids
//     issued before are "unknown" after it, as are another tenant's;
//   - DeadKey: the dead letters, oldest first, each {"offset","deliveries","event"}.
//
// A lease call's cost depends on the events it hands out, never on the queue's length nor on
// how many events are leased.

// MaxLeased is the most events of one tenant leased at once.
const MaxLeased = 10000

// GoneRetention is how long a lease id of an event that was trimmed or went to the dead
// letters answers "trimmed"; afterwards it answers "already_acked". It exceeds the longest
// visibility (12 hours).
const GoneRetention = 24 * time.Hour

// leaseKeys are the keys of the lease and ack scripts, in their KEYS order.
func leaseKeys(tenantID uint64) []string {
	return []string{Key(tenantID), OffsetKey(tenantID), LeaseStateKey(tenantID), LeaseExpiryKey(tenantID),
		AckedKey(tenantID), GoneKey(tenantID), LeaseNextKey(tenantID), LeaseEpochKey(tenantID), DeadKey(tenantID),
		LeaseWaitKey(tenantID), WakeChannel(tenantID), DeadAtKey(tenantID),
		LeaseRangesKey(tenantID), LeaseRangeStartKey(tenantID), LeaseRangeExpiryKey(tenantID), LeaseRangeHeldKey(tenantID),
		LeaseBatchesKey(tenantID), LeaseBatchesAtKey(tenantID), SizeKey(tenantID)}
}

// Leased is one event handed out by Lease.
type Leased struct {
	LeaseID    string
	Offset     int64
	Deliveries int64
	Event      string // the stored queue JSON
}

// LeaseResult is what one Lease call did.
type LeaseResult struct {
	Events     []Leased
	ExpiresAt  time.Time // when the leases expire, on Redis's clock
	NextExpiry time.Time // the earliest lease expiry of the tenant; zero when none is leased
	Trimmed    Trimmed   // the acknowledged front trimmed because events went to the dead letters
	// BatchID names every event of this call: acknowledging it (KindBatch) acknowledges them all.
	BatchID string
	// ReadAhead reports that the call read its new events in the lease script's round trip.
	ReadAhead bool
	// DeadAdded and DeadDropped count the dead letters this call added and dropped (past the
	// cap or expired); Redelivered the events it leased again; Live the tenant's live leases
	// after it.
	DeadAdded, DeadDropped, Redelivered, Live int64
}

// LeaseArgs are a Lease call's parameters.
type LeaseArgs struct {
	Limit         int           // most events to lease
	Visibility    time.Duration // how long the leases last
	MaxDeliveries int64         // leases of one event before it goes to the dead letters
	Wait          time.Duration // > 0: the caller waits for events if none is available
	Dead          DeadPolicy    // the bounds of the dead letters
}

// Lease hands out up to args.Limit events of tenantID's queue that no live lease holds and
// that are not acknowledged, lowest offset first, atomically (one script). Events whose lease
// expired or was retried come first; one leased MaxDeliveries times goes to the dead letters
// instead. Never more than MaxLeased events are leased at once.
func (s *Store) Lease(ctx context.Context, tenantID uint64, args LeaseArgs) (LeaseResult, error) {
	signKey, err := s.batches.load(ctx, s.rdb) // before the script: a lease is never answered without its batch id
	if err != nil {
		return LeaseResult{}, err
	}
	nonce := randomHex(8)
	keys := leaseKeys(tenantID)
	scriptArgs := []any{args.Limit, args.Visibility.Milliseconds(), max(args.MaxDeliveries, 1), MaxLeased, randomHex(8),
		nonce, args.Wait.Milliseconds(), args.Dead.max(), args.Dead.retention().Milliseconds(), GoneRetention.Milliseconds(), s.maxPageBytes()}
	var res []any
	var ahead *readAhead
	if int64(args.Limit)*readAheadEventBytes <= s.maxPageBytes() {
		res, ahead, err = s.leaseReadingAhead(ctx, tenantID, keys, scriptArgs, args.Limit)
	}
	if res == nil && err == nil {
		res, err = leaseScript.Run(ctx, s.rdb, keys, scriptArgs...).Slice()
	}
	if err != nil {
		return LeaseResult{}, fmt.Errorf("eventqueue: lease: %w", err)
	}
	if len(res) < leaseHead || (len(res)-leaseHead)%3 != 0 {
		return LeaseResult{}, fmt.Errorf("eventqueue: lease: script answered %d values", len(res))
	}
	fresh := toInt(res[leaseHead-1])
	epoch, _ := res[0].(string)
	out := LeaseResult{ExpiresAt: time.UnixMilli(toInt(res[1])).UTC(), Trimmed: trimmedOf(res[2:5])}
	if next := toInt(res[5]); next >= 0 {
		out.NextExpiry = time.UnixMilli(next).UTC()
	}
	out.DeadAdded, out.DeadDropped, out.Redelivered, out.Live = toInt(res[6]), toInt(res[7]), toInt(res[8]), toInt(res[9])
	out.Events = make([]Leased, 0, (len(res)-leaseHead)/3+int(fresh))
	for i := leaseHead; i < len(res); i += 3 {
		offset := toInt(res[i])
		ev, _ := res[i+2].(string)
		out.Events = append(out.Events, Leased{
			LeaseID: LeaseID(epoch, offset, nonce), Offset: offset, Deliveries: toInt(res[i+1]), Event: ev,
		})
	}
	first, end := toInt(res[10]), toInt(res[10])+fresh // the events leased for the first time
	if fresh == 0 {
		first, end = 0, 0
	} else {
		from, events, err := s.freshEvents(ctx, tenantID, epoch, toInt(res[3]), first, int(fresh), ahead)
		if err != nil {
			return LeaseResult{}, err
		}
		for i, ev := range events {
			offset := from + int64(i)
			out.Events = append(out.Events, Leased{LeaseID: LeaseID(epoch, offset, nonce), Offset: offset, Deliveries: 1, Event: ev})
		}
	}
	out.BatchID = signBatchID(signKey, tenantID, batchID(epoch, first, end, nonce, out.Redelivered > 0))
	out.ReadAhead = ahead != nil
	if fresh > 0 {
		s.noteLease(tenantID, toInt(res[3]), first, end)
	}
	return out, nil
}

// maxBatchRecords is the most lease calls of one tenant whose events leased again are
// remembered for their batch id (LeaseBatchesKey, written by the lease script): each record holds up to MaxLeased offsets, so without a cap a tenant's
// redeliveries would grow it for a whole GoneRetention. A batch forgotten is unknown; its
// consumer acknowledges the lease ids (the SDK does so by itself).
const maxBatchRecords = 1000

// readAheadEventBytes is the size of event a lease reads ahead for: the read ahead LRANGEs
// limit events before the script has said how many fit in MaxPageBytes, so it is made only
// when limit events of this size would (always, with the default bound and the largest event
// the tracking routes take).
const readAheadEventBytes = 8 << 10

// NoBatchID is the batch id of a lease call that leased nothing without asking Redis (the
// tenant's events are not queued): it is no tenant's, so acknowledging it answers unknown.
const NoBatchID = "none-0-0-none-0"

// A batch id names the events of one lease call: epoch-first-end-nonce-again-signature, with
// [first, end) the events leased for the first time (one run of offsets), again "1" when the
// call also leased events again, whose offsets the lease script recorded under its nonce, and
// the signature signBatchID's. batchID returns it unsigned.
func batchID(epoch string, first, end int64, nonce string, again bool) string {
	flag := "0"
	if again {
		flag = "1"
	}
	return epoch + "-" + strconv.FormatInt(first, 10) + "-" + strconv.FormatInt(end, 10) + "-" + nonce + "-" + flag
}

// parseBatchID reads a batch id of tenantID back into the ack script's arguments; ok is false
// for a string that is not one, or that key did not sign for tenantID.
func parseBatchID(key []byte, tenantID uint64, id string) (args [5]any, ok bool) {
	if len(id) > maxLeaseIDLen {
		return args, false
	}
	base, ok := verifyBatchID(key, tenantID, id)
	if !ok {
		return args, false
	}
	parts := strings.Split(base, "-")
	if len(parts) != 5 || (parts[4] != "0" && parts[4] != "1") {
		return args, false
	}
	for _, p := range parts[1:3] {
		if n, err := strconv.ParseInt(p, 10, 64); err != nil || n < 0 || strconv.FormatInt(n, 10) != p {
			return args, false
		}
	}
	return [5]any{parts[0], parts[1], parts[2], parts[3], parts[4]}, true
}

// leaseHead is how many values the lease script answers before the events it leased again.
const leaseHead = 12

// LeaseID is the lease id of the event at offset leased by the lease call nonce.
func LeaseID(epoch string, offset int64, nonce string) string {
	return epoch + "-" + strconv.FormatInt(offset, 10) + "-" + nonce
}

// AckKind is what an acknowledgement asks.
type AckKind byte

// The kinds of acknowledgement.
const (
	KindAck    AckKind = 'a' // the event is done
	KindRetry  AckKind = 'r' // end the lease now: the event may be leased again at once
	KindExtend AckKind = 'e' // the lease expires visibility from now
	// KindBatch acknowledges every event of a lease call not yet acknowledged, as KindAck of
	// each of its lease ids would; AckItem.LeaseID is then the call's batch id.
	KindBatch AckKind = 'b'
)

// Statuses of acknowledgements (see the contract's "Shared consumption").
const (
	StatusAcked        = "acked"
	StatusAlreadyAcked = "already_acked"
	StatusRetried      = "retried"
	StatusExtended     = "extended"
	StatusExpired      = "expired"
	StatusTrimmed      = "trimmed"
	StatusUnknown      = "unknown"
)

// AckItem is one lease id to acknowledge, retry or extend.
type AckItem struct {
	Kind    AckKind
	LeaseID string
}

// maxLeaseIDLen bounds the lease and batch ids worth parsing.
const maxLeaseIDLen = 128

// Settled is the outcome of one AckItem: a status, and for KindBatch how many events it
// acknowledged (StatusAcked, possibly 0) or StatusUnknown.
type Settled struct {
	Status string
	Acked  int64
}

// maxBatchEvents bounds the events of batches one ack script acknowledges: a call naming more
// runs several scripts, so that no batch id, genuine or not, holds Redis for long.
const maxBatchEvents = 10 * maxRange

// Settle applies items to tenantID's leases, atomically (one script), extending with
// visibility, and returns an outcome per item. Items of KindBatch are applied after the
// others; a call whose batches hold more than maxBatchEvents events applies them in several
// scripts. Acknowledged events at the front of the queue are trimmed as Trim would (Trimmed
// says what went). A lease or batch id that is not one of the tenant's is StatusUnknown.
func (s *Store) Settle(ctx context.Context, tenantID uint64, items []AckItem, visibility time.Duration) ([]Settled, Trimmed, error) {
	out := make([]Settled, len(items))
	args := []any{visibility.Milliseconds(), 0}
	var perID []int // the index in items of each lease id sent
	type batch struct {
		args  [5]any
		index []int // every item naming it: the first gets the outcome, the others repeat it
	}
	var batches []*batch
	byID := map[string]*batch{}
	var signKey []byte
	for i, it := range items {
		out[i].Status = StatusUnknown
		if it.Kind == KindBatch {
			if signKey == nil {
				var err error
				if signKey, err = s.batches.load(ctx, s.rdb); err != nil {
					return nil, Trimmed{}, err
				}
			}
			if b := byID[it.LeaseID]; b != nil {
				b.index = append(b.index, i)
			} else if a, ok := parseBatchID(signKey, tenantID, it.LeaseID); ok {
				b = &batch{args: a, index: []int{i}}
				byID[it.LeaseID] = b
				batches = append(batches, b)
			}
			continue
		}
		args = append(args, leaseArgs(it)...)
		perID = append(perID, i)
	}
	args[1] = len(perID)
	var trimmed Trimmed
	for len(perID) > 0 || len(batches) > 0 {
		var group []*batch
		for events := 0; len(batches) > 0 && (len(group) == 0 || events+batchEvents(batches[0].args) <= maxBatchEvents); batches = batches[1:] {
			events += batchEvents(batches[0].args)
			group = append(group, batches[0])
			args = append(args, batches[0].args[:]...)
		}
		res, err := ackScript.Run(ctx, s.rdb, leaseKeys(tenantID), args...).Slice()
		if err != nil {
			return nil, trimmed, fmt.Errorf("eventqueue: ack: %w", err)
		}
		if len(res) != 3+len(perID)+len(group) {
			return nil, trimmed, fmt.Errorf("eventqueue: ack: script answered %d values for %d ids and %d batches", len(res), len(perID), len(group))
		}
		for k, i := range perID {
			out[i].Status, _ = res[3+k].(string)
		}
		for k, b := range group {
			first := Settled{Status: StatusUnknown}
			if n := toInt(res[3+len(perID)+k]); n >= 0 {
				first = Settled{Status: StatusAcked, Acked: n}
			}
			for j, i := range b.index {
				out[i] = first
				if j > 0 && first.Status == StatusAcked {
					out[i].Acked = 0 // the first acknowledged them
				}
			}
		}
		trimmed = trimmed.then(trimmedOf(res[0:3]))
		perID, args = nil, []any{visibility.Milliseconds(), 0}
	}
	if trimmed.Count > 0 {
		s.noteFront(tenantID, trimmed.Front)
	}
	return out, trimmed, nil
}

// batchEvents is how many events a batch id's arguments name at most: its run of new events,
// and as many again as a lease call hands out for the ones leased again.
func batchEvents(args [5]any) int {
	first, _ := strconv.Atoi(args[1].(string))
	end, _ := strconv.Atoi(args[2].(string))
	n := max(end-first, 0)
	if args[4] == "1" {
		n += maxRange
	}
	return n
}

// leaseArgs are the ack script's arguments for one lease id: kind, epoch, offset, nonce.
func leaseArgs(it AckItem) []any {
	if len(it.LeaseID) <= maxLeaseIDLen {
		parts := strings.Split(it.LeaseID, "-")
		if len(parts) == 3 {
			if n, err := strconv.ParseInt(parts[1], 10, 64); err == nil && n >= 0 && strconv.FormatInt(n, 10) == parts[1] {
				return []any{string(it.Kind), parts[0], parts[1], parts[2]}
			}
		}
	}
	return []any{string(it.Kind), "", "-1", ""} // not a lease id at all: the script answers unknown
}

// then is t followed by u, a later trim of the same queue.
func (t Trimmed) then(u Trimmed) Trimmed {
	if u.Count == 0 {
		if t.Count == 0 {
			return u
		}
		return t
	}
	return Trimmed{Count: t.Count + u.Count, Front: u.Front, LastID: u.LastID}
}

func trimmedOf(v []any) Trimmed {
	out := Trimmed{Count: toInt(v[0]), Front: toInt(v[1])}
	out.LastID, _ = v[2].(string)
	return out
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
