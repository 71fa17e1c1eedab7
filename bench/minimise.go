package main

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/models"
)

// Minimise compares ingestion's throughput for a tenant with AnonymizeIp and
// redact_query_params on against one with both off, on one database: the same bodies (fifty
// events a request, each URL with two query parameters, both of them redacted when on), the
// same number of clients, in rounds of alternating order so that drift in the machine falls
// on both. Ratio is the median of the rounds' ratios (on / off).
type Minimise struct {
	Database    string    `json:"database"`
	Clients     int       `json:"clients"`
	RoundSecs   float64   `json:"round_seconds"`
	Off         []float64 `json:"off_requests_per_sec"`
	On          []float64 `json:"on_requests_per_sec"`
	OffMedian   float64   `json:"off_median"`
	OnMedian    float64   `json:"on_median"`
	Ratio       float64   `json:"ratio"`
	TargetRatio float64   `json:"target_ratio_min"`
	Met         bool      `json:"met"`
}

// minimisePlan sizes the comparison.
type minimisePlan struct {
	rounds, clients int
	round           time.Duration
}

var (
	fullMinimise  = minimisePlan{rounds: 10, clients: 16, round: 2 * time.Second}
	quickMinimise = minimisePlan{rounds: 1, clients: 8, round: 500 * time.Millisecond}
)

// benchMinimise measures Minimise against the running services.
func benchMinimise(ctx context.Context, s *stack, dbName string, p minimisePlan) (*Minimise, error) {
	res := &Minimise{Database: dbName, Clients: p.clients, RoundSecs: p.round.Seconds(), TargetRatio: 0.95}
	off, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return nil, err
	}
	on, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return nil, err
	}
	err = s.db.WithContext(ctx).Model(&models.Tenant{}).Where("id = ?", on.ID).
		Update("redact_query_params", models.StringList{"ref", "utm_source"}).Error
	if err != nil {
		return nil, err
	}
	if err := features.New(s.db, clock.Real{}).Set(ctx, features.AnonymizeIp, on.ID, true); err != nil {
		return nil, err
	}
	postOff := poster(s, "/api/track", trackBodies(off.SiteKey, 50, 64))
	postOn := poster(s, "/api/track", trackBodies(on.SiteKey, 50, 64))
	// A warm-up of each, until the api's caches know the tenants and their settings.
	for _, post := range []func(context.Context, int) error{postOff, postOn} {
		if _, err := throughput(ctx, p.clients, p.round/3, post); err != nil {
			return nil, err
		}
	}
	// Rounds in pairs, in alternating order (off then on, on then off), so that a drift of the
	// machine through the run (autovacuum, checkpoints) weighs on both; the ratio is the median
	// of the pairs' ratios.
	var ratios []float64
	for i := range p.rounds {
		first, second := postOff, postOn
		if i%2 == 1 {
			first, second = postOn, postOff
		}
		a, err := throughput(ctx, p.clients, p.round, first)
		if err != nil {
			return nil, err
		}
		b, err := throughput(ctx, p.clients, p.round, second)
		if err != nil {
			return nil, err
		}
		off, on := a, b
		if i%2 == 1 {
			off, on = b, a
		}
		res.Off, res.On = append(res.Off, off), append(res.On, on)
		if off > 0 {
			ratios = append(ratios, on/off)
		}
	}
	res.OffMedian, res.OnMedian, res.Ratio = medianOf(res.Off), medianOf(res.On), medianOf(ratios)
	res.Met = res.Ratio >= res.TargetRatio
	s.logf("  minimisation %s: %.0f req/s on, %.0f off (%.3f×); rounds on %v, off %v",
		dbName, res.OnMedian, res.OffMedian, res.Ratio, res.On, res.Off)
	return res, nil
}

// throughput runs clients closed loops of do for d and returns the requests a second that
// succeeded (a failure is an error: ingestion refuses nothing here).
func throughput(ctx context.Context, clients int, d time.Duration, do func(context.Context, int) error) (float64, error) {
	start := time.Now()
	var next atomic.Int64
	var first atomic.Value
	_, n, failed, err := closedLoop(ctx, clients, d, func(ctx context.Context, _ int, _ *bytes.Buffer) error {
		err := do(ctx, int(next.Add(1)))
		if err != nil {
			first.CompareAndSwap(nil, err.Error())
		}
		return err
	})
	if err == nil && failed > 0 {
		err = fmt.Errorf("minimisation: %d requests failed, the first: %v", failed, first.Load())
	}
	return float64(n) / time.Since(start).Seconds(), err
}

func (m *Minimise) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	name := fmt.Sprintf("minimisation %s (50 events/request, %d clients)", m.Database, m.Clients)
	add(name, "req/s with AnonymizeIp and redact_query_params (beside: off; ratio: median of rounds)", m.OnMedian, &m.OffMedian, &m.Ratio, "≥ 0.95×", &m.Met)
}
