package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
)

// limitsOn switches every rate limit on with budgets the bench never spends: all its load
// comes from one address, which the defaults (100/s per address) would refuse, and the point is
// what the checks cost, not what a refusal costs.
var limitsOn = []string{"RATE_LIMIT_TRACK=10000000/s", "RATE_LIMIT_TRACK_IP=10000000/s", "RATE_LIMIT_PLATFORM=600000000/m"}

// limitsPlan is how scenario 6 runs: turns alternate off, on, off, on, … and each turn
// restarts the api and worker in its mode, then measures ingestion and the queue read briefly.
type limitsPlan struct {
	turns     int           // turns per mode
	clients   int           // closed-loop clients posting 50-event requests
	warmUp    time.Duration // ingestion not counted at the start of a turn
	ingestFor time.Duration // ingestion counted per turn
	reads     int           // full-queue reads per turn
}

// LimitsCost is scenario 6: ingestion throughput (50 events a request, closed loop) and the
// queue read's median latency on Postgres with the rate limits off and on. Many short turns
// alternate the two modes so that the machine's drift falls on both; each side is reported as
// the median of its turns with its range, beside the ratio of the medians. The reads do not
// need turns of their own: each turn also starts a second api in the other mode, and the
// reads alternate between the two, so that every read with the limits on has one without
// them next to it.
type LimitsCost struct {
	EnvOn         []string  `json:"env_on"`
	Clients       int       `json:"clients"`
	IngestSeconds float64   `json:"ingest_seconds_per_turn"`
	ReadsPerTurn  int       `json:"reads_per_turn"`
	IngestOff     []float64 `json:"ingest_off_events_per_second"` // per turn, in order
	IngestOn      []float64 `json:"ingest_on_events_per_second"`
	// ReadOffP50 and ReadOnP50 are each turn's median read through the api without and with
	// the limits (one of them the turn's api, the other its second api).
	ReadOffP50 []float64 `json:"read_off_median_ms"`
	ReadOnP50  []float64 `json:"read_on_median_ms"`
	// ReadPairRatios are on ÷ off of each turn's medians.
	ReadPairRatios []float64 `json:"read_pair_ratios"`
	// CPUOff and CPUOn are the api's CPU time (user + system) per request while ingestion
	// counted, in µs: less disturbed by other work on the machine than the throughput.
	CPUOff []float64 `json:"api_cpu_off_us_per_request"`
	CPUOn  []float64 `json:"api_cpu_on_us_per_request"`
	// IngestPairRatios are on ÷ off of each adjacent pair of turns (off i, on i).
	IngestPairRatios []float64 `json:"ingest_pair_ratios"`
	IngestRatio      float64   `json:"ingest_ratio"` // median on ÷ median off
	ReadRatio        float64   `json:"read_ratio"`   // median of ReadPairRatios
	Target           float64   `json:"target_overhead_max"`
	Met              bool      `json:"met"`
}

// benchLimits runs the turns of scenario 6 on a Postgres database of its own.
func benchLimits(ctx context.Context, s *stack, p limitsPlan) (*LimitsCost, error) {
	url, err := s.postgresDatabase("bench_limits")
	if err != nil {
		return nil, err
	}
	res := &LimitsCost{EnvOn: limitsOn, Target: 0.10, Clients: p.clients, IngestSeconds: p.ingestFor.Seconds(), ReadsPerTurn: p.reads}
	defer func() { s.extraEnv = nil }()
	for turn := 0; turn < p.turns*2; turn++ {
		on := turn%2 == 1
		s.extraEnv = nil
		if on {
			s.extraEnv = limitsOn
		}
		mode := map[bool]string{false: "off", true: "on"}[on]
		if err := s.startServices(ctx, url); err != nil {
			return nil, err
		}
		t, err := limitsTurn(ctx, s, p, on)
		s.stopServices()
		if err != nil {
			return nil, err
		}
		s.logf("  limits %s, turn %d: %.0f events/s at 50/req, api CPU %.0f µs a request; queue read median %.2f ms with the limits on, %.2f off",
			mode, turn/2+1, t.ingest, t.cpu, t.readOn, t.readOff)
		res.ReadOnP50, res.ReadOffP50 = append(res.ReadOnP50, t.readOn), append(res.ReadOffP50, t.readOff)
		res.ReadPairRatios = append(res.ReadPairRatios, t.readOn/t.readOff)
		if on {
			res.CPUOn, res.IngestOn = append(res.CPUOn, t.cpu), append(res.IngestOn, t.ingest)
			res.IngestPairRatios = append(res.IngestPairRatios, t.ingest/res.IngestOff[len(res.IngestOff)-1])
		} else {
			res.CPUOff, res.IngestOff = append(res.CPUOff, t.cpu), append(res.IngestOff, t.ingest)
		}
	}
	res.IngestRatio = medianOf(res.IngestOn) / medianOf(res.IngestOff)
	res.ReadRatio = medianOf(res.ReadPairRatios)
	res.Met = res.IngestRatio >= 1-res.Target && res.ReadRatio <= 1+res.Target
	return res, nil
}

// limitsTurnResult is one turn's figures: ingestion in the turn's mode, and the median reads with
// the limits on and off.
type limitsTurnResult struct {
	ingest, cpu     float64 // events/s; the api's CPU µs a request
	readOn, readOff float64 // ms
}

// limitsTurn measures one turn on freshly started services in mode on: p.reads reads of a full
// queue through the turn's api and as many through a second api in the other mode, one after
// the other by turns, then ingestion by p.clients closed-loop clients for p.warmUp +
// p.ingestFor, of which the last p.ingestFor counts, with the api's CPU time per request
// meanwhile. The second api is stopped before the ingestion.
func limitsTurn(ctx context.Context, s *stack, p limitsPlan, on bool) (limitsTurnResult, error) {
	var t limitsTurnResult
	// Each turn starts from an empty events table, so that the table's growth does not drift.
	if err := s.db.WithContext(ctx).Exec("TRUNCATE tracked_events").Error; err != nil {
		return t, err
	}
	reader, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return t, err
	}
	if err := fillQueue(ctx, s.rdb, reader.ID, queuePayloads(reader.ID, queueEvents)); err != nil {
		return t, err
	}
	if t.readOn, t.readOff, err = limitsReads(ctx, s, p.reads, reader.Token, on); err != nil {
		return t, err
	}
	s.rdb.Del(ctx, eventqueue.Key(reader.ID))

	tn, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return t, err
	}
	bodies := trackBodies(tn.SiteKey, 50, 64)
	n, cpu, err := ingestFor(ctx, p, s.api.pid(), func(ctx context.Context, i int) error {
		req := s.request(ctx, "POST", "/api/track", "", bodies[i%len(bodies)])
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", userAgent)
		return expect(s.http, req, 202)
	})
	if err != nil {
		return t, err
	}
	s.rdb.Del(ctx, eventqueue.Key(tn.ID))
	t.ingest, t.cpu = float64(n*50)/p.ingestFor.Seconds(), float64(cpu.Microseconds())/float64(max(n, 1))
	return t, nil
}

// limitsReads starts a second api in the mode other than on and reads the queue n times
// through each api, alternating which goes first (after two warm-up reads of each), and
// returns the median with the limits on and off, in ms.
func limitsReads(ctx context.Context, s *stack, n int, token string, on bool) (onMs, offMs float64, err error) {
	var extra []string
	if !on {
		extra = limitsOn
	}
	side, sideBase, err := s.startSideAPI(ctx, map[bool]string{false: "limits-off", true: "limits-on"}[!on], extra)
	if err != nil {
		return 0, 0, err
	}
	defer side.stop()
	bases := map[bool]string{on: s.base, !on: sideBase}
	var body bytes.Buffer
	reads := map[bool][]time.Duration{} // by limits on
	for i := -2; i < n; i++ {
		for _, mode := range [2]bool{i%2 == 0, i%2 != 0} {
			start := time.Now()
			if _, err := s.readURL(ctx, bases[mode], "/api/platform/events", token, &body); err != nil {
				return 0, 0, err
			}
			if i >= 0 {
				reads[mode] = append(reads[mode], time.Since(start))
			}
		}
	}
	return summarize(reads[true]).P50, summarize(reads[false]).P50, nil
}

// ingestFor runs p.clients closed-loop clients calling post for p.warmUp + p.ingestFor and
// returns how many calls answered within the last p.ingestFor, and the CPU time process pid
// used meanwhile. Any failed call fails the turn.
func ingestFor(ctx context.Context, p limitsPlan, pid int, post func(context.Context, int) error) (int, time.Duration, error) {
	var (
		wg      sync.WaitGroup
		counted atomic.Int64
		once    sync.Once
		failure error
	)
	start := time.Now()
	from, until := start.Add(p.warmUp), start.Add(p.warmUp+p.ingestFor)
	var cpu time.Duration
	wg.Add(1)
	go func() { // the CPU time between from and until
		defer wg.Done()
		if sleepCtx(ctx, time.Until(from)) != nil {
			return
		}
		c0 := cpuTime(pid)
		if sleepCtx(ctx, time.Until(until)) != nil {
			return
		}
		cpu = cpuTime(pid) - c0
	}()
	for w := range p.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i += p.clients {
				err := post(ctx, i)
				done := time.Now()
				if done.After(until) {
					return
				}
				if err != nil {
					once.Do(func() { failure = err })
					return
				}
				if done.After(from) {
					counted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		return 0, 0, fmt.Errorf("limits: POST /api/track: %w", failure)
	}
	return int(counted.Load()), cpu, ctx.Err()
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// rows adds scenario 6 to the table: the medians of the turns, with their ratio, and the
// range of each side.
func (l *LimitsCost) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	name := fmt.Sprintf("rate limits on vs off (%d turns each)", len(l.IngestOn))
	add(name, "ingest events/s at 50/req, median (floor: limits off)", medianOf(l.IngestOn), f(medianOf(l.IngestOff)), f(l.IngestRatio),
		fmt.Sprintf("≥ %.2f×", 1-l.Target), b(l.IngestRatio >= 1-l.Target))
	add(name, "ingest events/s, min (beside: limits off)", minOf(l.IngestOn), f(minOf(l.IngestOff)), nil, "", nil)
	add(name, "ingest events/s, max (beside: limits off)", maxOf(l.IngestOn), f(maxOf(l.IngestOff)), nil, "", nil)
	add(name, "ingest on/off of each turn pair, min (beside: max)", minOf(l.IngestPairRatios), f(maxOf(l.IngestPairRatios)), nil, "", nil)
	add(name, "api CPU µs per request, median (beside: limits off)", medianOf(l.CPUOn), f(medianOf(l.CPUOff)), f(medianOf(l.CPUOn)/medianOf(l.CPUOff)), "", nil)
	reads := fmt.Sprintf("queue read, limits on vs off (%d turns)", len(l.ReadPairRatios))
	add(reads, "read ms on/off, median of the turns' ratios", l.ReadRatio, nil, nil,
		fmt.Sprintf("≤ %.2f×", 1+l.Target), b(l.ReadRatio <= 1+l.Target))
	add(reads, "read ms with the limits on, median of turns (beside: off)", medianOf(l.ReadOnP50), f(medianOf(l.ReadOffP50)), f(medianOf(l.ReadOnP50)/medianOf(l.ReadOffP50)), "", nil)
	add(reads, "read ms on/off of each turn, min (beside: max)", minOf(l.ReadPairRatios), f(maxOf(l.ReadPairRatios)), nil, "", nil)
}
