package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventqueue/queuetest"
)

// leaseBatch is the batch size of every consumer of scenario 11.
const leaseBatch = 100

// LeaseRun is one run of consumers draining a queue through leases.
type LeaseRun struct {
	Consumers    int     `json:"consumers"`
	PerID        bool    `json:"per_id_acks,omitempty"` // acks name every lease id, not the batch id
	WorkMs       float64 `json:"work_ms_per_event"`     // simulated processing, sleeping, per event
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_second"`
}

// Leases is scenario 11: shared consumption. Lease + batch ack round trips of batches of 100
// with 1, 2, 4 and 8 consumers, and lease + per-id acks with 1 and 8, against one GET +
// DELETE consumer of the same queue (the floor); 4 consumers with 1 ms of work per event
// against 1; lease latency while 10,000 events (the cap) are leased; Redis memory per leased
// event.
type Leases struct {
	Batch           int        `json:"batch"`
	FloorEventsPerS float64    `json:"floor_get_delete_events_per_second"` // the better of two runs
	Runs            []LeaseRun `json:"runs"`                               // no work: 1, 2, 4, 8 consumers, batch acks
	PerIDRuns       []LeaseRun `json:"per_id_runs"`                        // no work: 1 and 8 consumers, per-id acks
	SingleRatio     float64    `json:"single_ratio"`                       // 1 consumer ÷ floor
	SingleTarget    float64    `json:"single_target_min"`
	SingleMet       bool       `json:"single_met"`
	EightRatio      float64    `json:"eight_ratio"` // 8 consumers ÷ floor
	EightTarget     float64    `json:"eight_target_min"`
	EightMet        bool       `json:"eight_met"`
	WorkOne         LeaseRun   `json:"work_one"`
	WorkFour        LeaseRun   `json:"work_four"`
	WorkRatio       float64    `json:"work_ratio"` // 4 consumers ÷ 1, with work
	WorkTarget      float64    `json:"work_target_min"`
	WorkMet         bool       `json:"work_met"`
	AtCap           Latency    `json:"lease_100_at_cap"`              // 9,900 others leased, each call fills the cap
	Reclaim         Latency    `json:"lease_1000_reclaiming_expired"` // 10,000 expired leases reclaimed
	// The same single-consumer round trips on the queue store alone (the Redis scripts the
	// api runs, without HTTP): lease + batch ack and lease + per-id ack against read + trim,
	// to show where the time goes.
	StoreLeaseEventsPerS float64 `json:"store_lease_ack_events_per_second"`
	StorePerIDEventsPerS float64 `json:"store_lease_per_id_ack_events_per_second"`
	StoreReadEventsPerS  float64 `json:"store_read_trim_events_per_second"`
	// The lease keys' MEMORY USAGE is exact. INFO used_memory's change over the same leases
	// also counts what the api, the worker and expiring keys allocated or freed meanwhile:
	// since leases are kept as ranges, the keys hold about 1 KB for 10,000 leased events, less
	// than that noise, so the change can come out negative.
	MemoryPerLeased float64 `json:"redis_used_memory_bytes_per_leased"`
	KeysPerLeased   float64 `json:"redis_lease_keys_bytes_per_leased"`
}

// leasePlan sizes scenario 11.
type leasePlan struct {
	events     int // drained by each throughput run
	workEvents int // drained by each run with work
	capCalls   int // measured lease calls at the cap
	reclaims   int // rounds of 10,000 expired leases reclaimed
}

var (
	fullLeases  = leasePlan{events: 100000, workEvents: 4000, capCalls: 300, reclaims: 5}
	quickLeases = leasePlan{events: 3000, workEvents: 800, capCalls: 30, reclaims: 1}
)

// benchLeases runs scenario 11.
func benchLeases(ctx context.Context, s *stack, p leasePlan) (*Leases, error) {
	res := &Leases{Batch: leaseBatch, SingleTarget: 0.8, EightTarget: 0.9, WorkTarget: 3}
	n := max(p.events, p.workEvents, eventqueue.MaxLeased+p.capCalls*leaseBatch)
	if s.profile {
		n = max(n, profileEvents)
	}
	payloads := queuePayloads(1, n)
	fresh := func(n int) (*tenant, error) { // a new tenant whose queue holds n events
		t, err := s.seedTenant(ctx, "", true)
		if err == nil {
			err = fillQueue(ctx, s.rdb, t.ID, payloads[:n])
		}
		return t, err
	}
	floor := func() error {
		t, err := fresh(p.events)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := drainGetDelete(ctx, s, t); err != nil {
			return fmt.Errorf("leases: GET + DELETE floor: %w", err)
		}
		res.FloorEventsPerS = max(res.FloorEventsPerS, float64(p.events)/time.Since(start).Seconds())
		return s.emptied(ctx, t)
	}
	run := func(consumers, n int, work time.Duration, perID bool) (LeaseRun, error) {
		t, err := fresh(n)
		if err != nil {
			return LeaseRun{}, err
		}
		start := time.Now()
		if err := drainLeases(ctx, s, t, consumers, work, perID); err != nil {
			return LeaseRun{}, fmt.Errorf("leases: %d consumers: %w", consumers, err)
		}
		took := time.Since(start).Seconds()
		return LeaseRun{Consumers: consumers, PerID: perID, WorkMs: ms(work), Events: n, Seconds: took, EventsPerSec: float64(n) / took}, s.emptied(ctx, t)
	}

	if s.profile {
		if err := profileLeases(ctx, s, func() (*tenant, error) { return fresh(profileEvents) }); err != nil {
			return nil, err
		}
	}
	if err := floor(); err != nil {
		return nil, err
	}
	for _, c := range []int{1, 2, 4, 8} {
		r, err := run(c, p.events, 0, false)
		if err != nil {
			return nil, err
		}
		s.logf("  leases: %d consumers %.0f events/s", c, r.EventsPerSec)
		res.Runs = append(res.Runs, r)
	}
	for _, c := range []int{1, 8} {
		r, err := run(c, p.events, 0, true)
		if err != nil {
			return nil, err
		}
		s.logf("  leases, per-id acks: %d consumers %.0f events/s", c, r.EventsPerSec)
		res.PerIDRuns = append(res.PerIDRuns, r)
	}
	if err := floor(); err != nil { // again after: the ratio uses the better floor
		return nil, err
	}
	res.SingleRatio = res.Runs[0].EventsPerSec / res.FloorEventsPerS
	res.SingleMet = res.SingleRatio >= res.SingleTarget
	res.EightRatio = res.Runs[3].EventsPerSec / res.FloorEventsPerS
	res.EightMet = res.EightRatio >= res.EightTarget
	var err error
	if res.WorkOne, err = run(1, p.workEvents, time.Millisecond, false); err != nil {
		return nil, err
	}
	if res.WorkFour, err = run(4, p.workEvents, time.Millisecond, false); err != nil {
		return nil, err
	}
	res.WorkRatio = res.WorkFour.EventsPerSec / res.WorkOne.EventsPerSec
	res.WorkMet = res.WorkRatio >= res.WorkTarget

	if err := storeRoundTrips(ctx, s, res, payloads[:p.events]); err != nil {
		return nil, err
	}

	// At the cap: 9,900 events leased for long, then each measured call leases the next 100
	// (10,000 leased) and they are acknowledged behind the held front.
	t, err := fresh(eventqueue.MaxLeased - leaseBatch + p.capCalls*leaseBatch)
	if err != nil {
		return nil, err
	}
	for held := 0; held < eventqueue.MaxLeased-leaseBatch; {
		ids, _, err := leaseOnce(ctx, s, t, min(1000, eventqueue.MaxLeased-leaseBatch-held), 600)
		if err != nil {
			return nil, err
		}
		held += len(ids)
	}
	var lat []time.Duration
	for range p.capCalls {
		start := time.Now()
		ids, batch, err := leaseOnce(ctx, s, t, leaseBatch, 600)
		lat = append(lat, time.Since(start))
		if err != nil {
			return nil, err
		}
		if len(ids) != leaseBatch {
			return nil, fmt.Errorf("leases: at the cap a lease of %d got %d", leaseBatch, len(ids))
		}
		if err := ackBatch(ctx, s, t, batch, len(ids)); err != nil {
			return nil, err
		}
	}
	res.AtCap = summarize(lat)
	s.rdb.Del(ctx, eventqueue.Key(t.ID))

	// Reclaiming: 10,000 events leased for 1 s; once expired, ten calls of 1,000 take them
	// again, measured.
	if t, err = fresh(eventqueue.MaxLeased); err != nil {
		return nil, err
	}
	lat = lat[:0]
	for round := 0; round <= p.reclaims; round++ {
		for range eventqueue.MaxLeased / 1000 {
			start := time.Now()
			ids, _, err := leaseOnce(ctx, s, t, 1000, 1)
			if round > 0 {
				lat = append(lat, time.Since(start))
			}
			if err != nil {
				return nil, err
			}
			if len(ids) != 1000 {
				return nil, fmt.Errorf("leases: reclaim round %d: a lease of 1000 got %d", round, len(ids))
			}
		}
		if err := sleepCtx(ctx, 1100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	res.Reclaim = summarize(lat)
	s.rdb.Del(ctx, eventqueue.Key(t.ID))

	// Memory: 10,000 events leased on a fresh tenant.
	if t, err = fresh(eventqueue.MaxLeased); err != nil {
		return nil, err
	}
	keys := []string{eventqueue.LeaseStateKey(t.ID), eventqueue.LeaseExpiryKey(t.ID), eventqueue.LeaseNextKey(t.ID), eventqueue.LeaseEpochKey(t.ID),
		eventqueue.LeaseRangesKey(t.ID), eventqueue.LeaseRangeStartKey(t.ID), eventqueue.LeaseRangeExpiryKey(t.ID), eventqueue.LeaseRangeHeldKey(t.ID)}
	keyBytes := func() int64 {
		var n int64
		for _, k := range keys {
			v, _ := s.rdb.MemoryUsage(ctx, k, 0).Result()
			n += v
		}
		return n
	}
	usedBefore, keysBefore := s.usedMemory(ctx), keyBytes()
	for leased := 0; leased < eventqueue.MaxLeased; {
		ids, _, err := leaseOnce(ctx, s, t, 1000, 600)
		if err != nil {
			return nil, err
		}
		leased += len(ids)
	}
	res.MemoryPerLeased = float64(s.usedMemory(ctx)-usedBefore) / eventqueue.MaxLeased
	res.KeysPerLeased = float64(keyBytes()-keysBefore) / eventqueue.MaxLeased
	s.rdb.Del(ctx, append(keys, eventqueue.Key(t.ID))...)
	return res, nil
}

// storeRoundTrips drains a queue of payloads through the queue store, as the api does without
// HTTP: once with ReadPage + Trim of 100, once with Lease + Settle of the batch id, once with
// Lease + Settle of every lease id.
func storeRoundTrips(ctx context.Context, s *stack, res *Leases, payloads []any) error {
	store := eventqueue.New(s.rdb)
	defer store.Close()
	const readID = 1<<40 + 1 // a tenant no one else uses
	if err := fillQueue(ctx, s.rdb, readID, payloads); err != nil {
		return err
	}
	start := time.Now()
	for {
		page, err := queuetest.ReadPage(ctx, store, readID, leaseBatch)
		if err != nil {
			return err
		}
		n, off := page.Count, page.Offset
		page.Release()
		if n == 0 {
			break
		}
		if _, err := store.Trim(ctx, readID, int64(n), off); err != nil {
			return err
		}
	}
	res.StoreReadEventsPerS = float64(len(payloads)) / time.Since(start).Seconds()
	for _, perID := range []bool{false, true} {
		leaseID := uint64(1<<40 + 2) // another
		if perID {
			leaseID++
		}
		if err := fillQueue(ctx, s.rdb, leaseID, payloads); err != nil {
			return err
		}
		start = time.Now()
		for {
			l, err := store.Lease(ctx, leaseID, eventqueue.LeaseArgs{Limit: leaseBatch, Visibility: 30 * time.Second, MaxDeliveries: 10})
			if err != nil {
				return err
			}
			if len(l.Events) == 0 {
				break
			}
			items := []eventqueue.AckItem{{Kind: eventqueue.KindBatch, LeaseID: l.BatchID}}
			if perID {
				items = make([]eventqueue.AckItem, len(l.Events))
				for i, e := range l.Events {
					items[i] = eventqueue.AckItem{Kind: eventqueue.KindAck, LeaseID: e.LeaseID}
				}
			}
			if _, _, err := store.Settle(ctx, leaseID, items, 30*time.Second); err != nil {
				return err
			}
		}
		perS := float64(len(payloads)) / time.Since(start).Seconds()
		if perID {
			res.StorePerIDEventsPerS = perS
		} else {
			res.StoreLeaseEventsPerS = perS
		}
		if n := s.rdb.LLen(ctx, eventqueue.Key(leaseID)).Val(); n != 0 {
			return fmt.Errorf("leases: store round trips left %d events", n)
		}
	}
	return nil
}

// usedMemory is Redis's INFO memory used_memory.
func (s *stack) usedMemory(ctx context.Context) int64 {
	info, _ := s.rdb.Info(ctx, "memory").Result()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// emptied fails unless t's queue is empty, and drops what its leases left.
func (s *stack) emptied(ctx context.Context, t *tenant) error {
	if n := s.rdb.LLen(ctx, eventqueue.Key(t.ID)).Val(); n != 0 {
		return fmt.Errorf("leases: %d events left in the queue after the run", n)
	}
	return nil
}

// drainGetDelete consumes t's queue with one GET ?limit=100 + DELETE ?count&offset consumer
// until a read is empty.
func drainGetDelete(ctx context.Context, s *stack, t *tenant) error {
	for {
		r, err := s.http.Do(s.request(ctx, "GET", "/api/platform/events?limit="+strconv.Itoa(leaseBatch), t.Token, nil))
		if err != nil {
			return err
		}
		var page struct {
			Data struct {
				Count  int               `json:"count"`
				Events []json.RawMessage `json:"events"`
			} `json:"data"`
		}
		err = json.NewDecoder(r.Body).Decode(&page)
		r.Body.Close()
		if err != nil || r.StatusCode != 200 {
			return fmt.Errorf("GET: status %d, %v", r.StatusCode, err)
		}
		if page.Data.Count == 0 {
			return nil
		}
		path := fmt.Sprintf("/api/platform/events?count=%d&offset=%s", page.Data.Count, r.Header.Get("Queue-Offset"))
		if err := expect(s.http, s.request(ctx, "DELETE", path, t.Token, nil), 204); err != nil {
			return fmt.Errorf("DELETE: %w", err)
		}
	}
}

// drainLeases consumes t's queue with consumers lease + ack loops of batches of 100, each
// sleeping work per event before its ack (of the batch id, or of every lease id with perID),
// until every one has leased nothing.
func drainLeases(ctx context.Context, s *stack, t *tenant, consumers int, work time.Duration, perID bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, consumers)
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ids, batch, err := leaseOnce(ctx, s, t, leaseBatch, 30)
				if err != nil {
					errs <- err
					return
				}
				if len(ids) == 0 {
					return
				}
				for range ids {
					if work > 0 {
						time.Sleep(work)
					}
				}
				if perID {
					err = ackAll(ctx, s, t, ids)
				} else {
					err = ackBatch(ctx, s, t, batch, len(ids))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// leaseOnce leases up to limit of t's events for visibility seconds and returns their lease
// ids and the batch id, decoding the whole answer as a consumer would.
func leaseOnce(ctx context.Context, s *stack, t *tenant, limit, visibility int) ([]string, string, error) {
	path := fmt.Sprintf("/api/platform/events/leases?limit=%d&visibility=%d", limit, visibility)
	r, err := s.http.Do(s.request(ctx, "POST", path, t.Token, nil))
	if err != nil {
		return nil, "", err
	}
	defer r.Body.Close()
	var body struct {
		Data []struct {
			LeaseID    string          `json:"lease_id"`
			Offset     int64           `json:"offset"`
			Deliveries int             `json:"deliveries"`
			Event      json.RawMessage `json:"event"`
		} `json:"data"`
		ExpiresAt string `json:"expires_at"`
		BatchID   string `json:"batch_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != 200 {
		return nil, "", fmt.Errorf("lease: status %d, %v", r.StatusCode, err)
	}
	ids := make([]string, len(body.Data))
	for i, d := range body.Data {
		ids[i] = d.LeaseID
	}
	return ids, body.BatchID, nil
}

// ackBatch acknowledges a batch of n events by its id and checks they all were.
func ackBatch(ctx context.Context, s *stack, t *tenant, batch string, n int) error {
	data, err := postAcks(ctx, s, t, map[string]any{"batches": []string{batch}})
	if err != nil {
		return err
	}
	if len(data) != 1 || data[0].Status != "acked" || data[0].Acked != n {
		return fmt.Errorf("batch ack: %+v, want acked %d", data, n)
	}
	return nil
}

// ackAll acknowledges ids and checks every one is acked.
func ackAll(ctx context.Context, s *stack, t *tenant, ids []string) error {
	data, err := postAcks(ctx, s, t, map[string]any{"acks": ids})
	if err != nil {
		return err
	}
	for _, d := range data {
		if d.Status != "acked" {
			return fmt.Errorf("ack: status %q, want acked", d.Status)
		}
	}
	return nil
}

// ackEntry is one entry of an acks answer.
type ackEntry struct {
	Status string `json:"status"`
	Acked  int    `json:"acked"`
}

// postAcks posts body to the acks route and returns the entries of its answer.
func postAcks(ctx context.Context, s *stack, t *tenant, body map[string]any) ([]ackEntry, error) {
	payload, _ := json.Marshal(body)
	req := s.request(ctx, "POST", "/api/platform/events/acks", t.Token, payload)
	req.Header.Set("Content-Type", "application/json")
	r, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	var answer struct {
		Data []ackEntry `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&answer); err != nil || r.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(r.Body)
		return nil, fmt.Errorf("acks: status %d, %v %s", r.StatusCode, err, b)
	}
	return answer.Data, nil
}

// rows adds scenario 11 to the table.
func (l *Leases) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	name := fmt.Sprintf("leases, batches of %d, batch acks", l.Batch)
	for i, r := range l.Runs {
		metric := fmt.Sprintf("events/s, %d consumers (floor: GET + DELETE)", r.Consumers)
		switch i {
		case 0:
			add(name, "events/s, 1 consumer (floor: GET + DELETE)", r.EventsPerSec, f(l.FloorEventsPerS), f(l.SingleRatio),
				fmt.Sprintf("≥ %.1f×", l.SingleTarget), b(l.SingleMet))
		case 3:
			add(name, metric, r.EventsPerSec, f(l.FloorEventsPerS), f(l.EightRatio), fmt.Sprintf("≥ %.1f×", l.EightTarget), b(l.EightMet))
		default:
			add(name, metric, r.EventsPerSec, f(l.FloorEventsPerS), f(r.EventsPerSec/l.FloorEventsPerS), "", nil)
		}
	}
	for _, r := range l.PerIDRuns {
		add(fmt.Sprintf("leases, batches of %d, per-id acks", l.Batch), fmt.Sprintf("events/s, %d consumers (floor: GET + DELETE)", r.Consumers),
			r.EventsPerSec, f(l.FloorEventsPerS), f(r.EventsPerSec/l.FloorEventsPerS), "", nil)
	}
	add(name+", 1 ms work/event", "events/s, 4 consumers (beside: 1)", l.WorkFour.EventsPerSec, f(l.WorkOne.EventsPerSec), f(l.WorkRatio),
		fmt.Sprintf("≥ %.0f×", l.WorkTarget), b(l.WorkMet))
	add(name+", Redis scripts only", "events/s, lease + batch ack (floor: read + trim)", l.StoreLeaseEventsPerS, f(l.StoreReadEventsPerS),
		f(l.StoreLeaseEventsPerS/l.StoreReadEventsPerS), "", nil)
	add(fmt.Sprintf("leases, batches of %d, per-id acks, Redis scripts only", l.Batch), "events/s, lease + ack (floor: read + trim)", l.StorePerIDEventsPerS, f(l.StoreReadEventsPerS),
		f(l.StorePerIDEventsPerS/l.StoreReadEventsPerS), "", nil)
	add("lease 100 at the cap (10k leased)", "p50 / p99 ms", l.AtCap.P50, f(l.AtCap.P99), nil, "", nil)
	add("lease 1,000 reclaiming 10k expired", "p50 / p99 ms", l.Reclaim.P50, f(l.Reclaim.P99), nil, "", nil)
	add("Redis memory per leased event", "bytes, INFO used_memory change, noisy (beside: MEMORY USAGE of the lease keys, exact)", l.MemoryPerLeased, f(l.KeysPerLeased), nil, "", nil)
}

// profileEvents is the queue profileLeases drains each way: more than profileFor takes.
const profileEvents = 300_000

// profileLeases records CPU profiles of the api and of the bench itself (the client) while one
// consumer drains a queue (fresh) with lease + ack, then while one drains it with GET +
// DELETE, 2 s each (bench -profile): leases-1-api.pprof, leases-1-client.pprof, getdelete-1-….
func profileLeases(ctx context.Context, s *stack, fresh func() (*tenant, error)) error {
	const profileFor = 2 * time.Second
	for _, c := range []struct {
		name  string
		drain func(*tenant) error
	}{
		{"leases-1", func(t *tenant) error { return drainLeases(ctx, s, t, 1, 0, false) }},
		{"getdelete-1", func(t *tenant) error { return drainGetDelete(ctx, s, t) }},
	} {
		t, err := fresh()
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(s.dir, c.name+"-client.pprof"))
		if err != nil {
			return err
		}
		wait := s.profileDuring(ctx, c.name, profileFor)
		pprof.StartCPUProfile(f)
		drained := make(chan error, 1)
		go func() { drained <- c.drain(t) }()
		time.Sleep(profileFor)
		pprof.StopCPUProfile()
		f.Close()
		wait()
		if err := <-drained; err != nil {
			return err
		}
		s.logf("  profile %s of the client: %s", c.name, f.Name())
	}
	return nil
}
