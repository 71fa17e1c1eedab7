package main

import (
	"context"
	"fmt"

	"github.com/eventq/eventq/internal/eventqueue"
)

// limitsOn switches every rate limit on with budgets the bench never spends: all its load
// comes from one address, which the defaults (100/s per address) would refuse, and the point is
// what the checks cost (two Redis round trips per tracking request, one per platform request),
// not what a refusal costs.
var limitsOn = []string{"RATE_LIMIT_TRACK=10000000/s", "RATE_LIMIT_TRACK_IP=10000000/s", "RATE_LIMIT_PLATFORM=600000000/m"}

// LimitsCost is scenario 6: ingestion capacity (50 events a request) and the queue read's
// latency on Postgres with the rate limits off and on, measured in turns (off, on, off, on;
// the better of each mode counts), so that the machine's drift falls on both.
type LimitsCost struct {
	EnvOn          []string  `json:"env_on"`
	IngestOff      []float64 `json:"ingest_off_events_per_second"`
	IngestOn       []float64 `json:"ingest_on_events_per_second"`
	ReadOffP50     []float64 `json:"read_off_median_ms"`
	ReadOnP50      []float64 `json:"read_on_median_ms"`
	IngestOverhead float64   `json:"ingest_overhead"` // 1 - best on / best off
	ReadOverhead   float64   `json:"read_overhead"`   // best on / best off - 1
	Target         float64   `json:"target_overhead_max"`
	Met            bool      `json:"met"`
}

// benchLimits runs the turns of scenario 6 on a Postgres database of its own.
func benchLimits(ctx context.Context, s *stack, p plan) (*LimitsCost, error) {
	url, err := s.postgresDatabase("bench_limits")
	if err != nil {
		return nil, err
	}
	res := &LimitsCost{EnvOn: limitsOn, Target: 0.10}
	defer func() { s.extraEnv = nil }()
	for turn := 0; turn < p.limitTurns*2; turn++ {
		on := turn%2 == 1
		s.extraEnv = nil
		if on {
			s.extraEnv = limitsOn
		}
		mode := map[bool]string{false: "off", true: "on"}[on]
		if err := s.startServices(ctx, url); err != nil {
			return nil, err
		}
		ingest, read, err := limitsTurn(ctx, s, p)
		s.stopServices()
		if err != nil {
			return nil, err
		}
		s.logf("  limits %s: %.0f events/s at 50/req, queue read median %.2f ms", mode, ingest, read)
		if on {
			res.IngestOn, res.ReadOnP50 = append(res.IngestOn, ingest), append(res.ReadOnP50, read)
		} else {
			res.IngestOff, res.ReadOffP50 = append(res.IngestOff, ingest), append(res.ReadOffP50, read)
		}
	}
	res.IngestOverhead = 1 - maxOf(res.IngestOn)/maxOf(res.IngestOff)
	res.ReadOverhead = minOf(res.ReadOnP50)/minOf(res.ReadOffP50) - 1
	res.Met = res.IngestOverhead < res.Target && res.ReadOverhead < res.Target
	return res, nil
}

// limitsTurn measures one turn: a read of a full queue, then the ingestion search.
func limitsTurn(ctx context.Context, s *stack, p plan) (eventsPerSec, readMedianMs float64, err error) {
	reader, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return 0, 0, err
	}
	if err := fillQueue(ctx, s.rdb, reader.ID, queuePayloads(reader.ID, queueEvents)); err != nil {
		return 0, 0, err
	}
	read, err := benchQueueRead(ctx, s, reader, p.readIterations)
	if err != nil {
		return 0, 0, err
	}
	s.rdb.Del(ctx, eventqueue.Key(reader.ID))
	tn, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return 0, 0, err
	}
	in, err := benchIngest(ctx, s, tn, 50, p.ingest, &InsertFloor{Database: "postgres", Rows100: 1})
	if err != nil {
		return 0, 0, err
	}
	s.rdb.Del(ctx, eventqueue.Key(tn.ID))
	return in.EventsPerSec, read.API.P50, nil
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

// rows adds scenario 6 to the table.
func (l *LimitsCost) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	name := fmt.Sprintf("rate limits on vs off (%d turns each)", len(l.IngestOn))
	add(name, "ingest events/s at 50/req (floor: limits off)", maxOf(l.IngestOn), f(maxOf(l.IngestOff)), f(maxOf(l.IngestOn)/maxOf(l.IngestOff)),
		"≥ 0.90×", b(l.IngestOverhead < l.Target))
	add(name, "queue read median ms (floor: limits off)", minOf(l.ReadOnP50), f(minOf(l.ReadOffP50)), f(minOf(l.ReadOnP50)/minOf(l.ReadOffP50)),
		"≤ 1.10×", b(l.ReadOverhead < l.Target))
}
