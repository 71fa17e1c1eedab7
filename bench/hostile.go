package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
)

// Hostile clients and database outages: tracking through a Postgres outage (the spool), and the
// api's memory while clients post compressed bodies that decode to far more than they send.

// outagePlan is how long the outage scenario runs.
type outagePlan struct {
	rate                  float64       // tracking requests per second, one event each
	before, outage, after time.Duration // load before the halt, during it, after the restart
	bombClients           int           // clients posting bombs at once
	bombFor               time.Duration // how long they post
	bombDecodedBytes      int           // what each body decodes to
}

var (
	fullOutage  = outagePlan{rate: 1000, before: 5 * time.Second, outage: 30 * time.Second, after: 5 * time.Second, bombClients: 20, bombFor: 10 * time.Second, bombDecodedBytes: 50 << 20}
	quickOutage = outagePlan{rate: 500, before: time.Second, outage: 3 * time.Second, after: time.Second, bombClients: 20, bombFor: 2 * time.Second, bombDecodedBytes: 50 << 20}
)

// Outage is tracking through a Postgres outage at a fixed rate.
type Outage struct {
	RatePerSec float64 `json:"requests_per_second"`
	// PlannedSeconds is how long the plan halts Postgres (the scenario's name, the same in
	// every run); OutageSeconds how long it was down, from the halt to the restart's end.
	PlannedSeconds float64 `json:"planned_outage_seconds"`
	OutageSeconds  float64 `json:"outage_seconds"`
	Before         Latency `json:"before"` // 202s of requests due before the halt
	During         Latency `json:"during"` // due while the database was down
	Failed         int     `json:"failed"` // answers other than 202, errors, drops, in the whole run
	Spooled        int64   `json:"spooled_events"`
	// EmptySeconds runs from the restart until the spool is empty (the worker looks every
	// half second, and its first tries meet connections the restart closed); DrainSeconds is
	// the time the worker's successful drains took (its log), and DrainEventsPerSec the events
	// they stored over it.
	EmptySeconds      float64 `json:"empty_seconds"`
	DrainSeconds      float64 `json:"drain_seconds"`
	DrainEventsPerSec float64 `json:"drain_events_per_second"`
	// NormalEventsPerSec is ingestion's sustained rate at fifty events a request on Postgres in
	// this run (0 when that scenario did not run); Ratio is the drain rate over it.
	NormalEventsPerSec float64 `json:"normal_events_per_second"`
	Ratio              float64 `json:"ratio"`
	Met                bool    `json:"met"`
}

// Bombs is the api's memory while clients post compressed bodies that decode far past the
// tracking route's limit.
type Bombs struct {
	Clients         int     `json:"clients"`
	Seconds         float64 `json:"seconds"`
	DecodedMiB      float64 `json:"decoded_mib"` // what each body decodes to
	SentKiB         float64 `json:"sent_kib"`    // what each body is
	Requests        int64   `json:"requests"`
	Not413          int64   `json:"not_413"`
	IdleRSSMiB      float64 `json:"idle_rss_mib"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	AboveIdleMiB    float64 `json:"above_idle_mib"`
	TargetAboveIdle float64 `json:"target_above_idle_mib"`
	Met             bool    `json:"met"`
}

const (
	outageTargetRatio = 0.5
	bombTargetMiB     = 64
)

// runHostilePhase runs the outage and bomb scenarios on a Postgres database of their own.
func runHostilePhase(ctx context.Context, s *stack, p outagePlan, runOutage, runBombs bool, rep *Report) error {
	if !runOutage && !runBombs {
		return nil
	}
	url, err := s.postgresDatabase("hostile")
	if err != nil {
		return err
	}
	if err := s.startServices(ctx, url); err != nil {
		return err
	}
	defer s.stopServices()
	if runBombs {
		s.logf("bombs: %d clients posting gzip bodies of %d MiB decoded for %s", p.bombClients, p.bombDecodedBytes>>20, p.bombFor)
		if err := s.measure("bombs", func() (err error) { rep.Bombs, err = benchBombs(ctx, s, p); return }); err != nil {
			return err
		}
	}
	if runOutage {
		s.logf("outage: %.0f tracking requests/s, Postgres halted for %s", p.rate, p.outage)
		if err := s.measure("outage", func() (err error) { rep.Outage, err = benchOutage(ctx, s, p, normalRate(rep)); return }); err != nil {
			return err
		}
	}
	return nil
}

// normalRate is the run's sustained ingestion at fifty events a request on Postgres, or 0.
func normalRate(rep *Report) float64 {
	for _, in := range rep.Ingest {
		if in.Database == "postgres" && in.EventsPerRequest == 50 {
			return in.EventsPerSec
		}
	}
	return 0
}

func benchOutage(ctx context.Context, s *stack, p outagePlan, normal float64) (*Outage, error) {
	tn, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return nil, err
	}
	bodies := trackBodies(tn.SiteKey, 1, 64)
	queue := eventqueue.New(s.rdb)
	defer queue.Close()
	total := p.before + p.outage + p.after
	var halted, resumed atomic.Int64 // ns after the load's start
	start := time.Now()
	var spooled int64
	done := make(chan error, 1)
	go func() {
		if err := sleepCtx(ctx, p.before); err != nil {
			done <- err
			return
		}
		s.pg.Halt()
		halted.Store(int64(time.Since(start)))
		if err := sleepCtx(ctx, p.outage); err != nil {
			s.pg.Resume()
			done <- err
			return
		}
		spooled, _ = queue.SpoolEvents(ctx)
		err := s.pg.Resume()
		resumed.Store(int64(time.Since(start)))
		done <- err
	}()
	res := openLoop{Rate: p.rate, MaxDuration: total, N: int(p.rate * total.Seconds()), MaxInFlight: 4096,
		Do: func(ctx context.Context, i int) error {
			return expect(s.http, s.request(ctx, "POST", "/api/track", "", bodies[i%len(bodies)]), http.StatusAccepted)
		}}.run(ctx)
	if err := <-done; err != nil {
		return nil, fmt.Errorf("outage: %w", err)
	}
	restart := start.Add(time.Duration(resumed.Load()))
	for {
		n, err := queue.SpoolEvents(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Since(restart) > 5*time.Minute {
			return nil, fmt.Errorf("outage: the spool still holds %d events 5 minutes after the restart", n)
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return nil, err
		}
	}
	empty := time.Since(restart)
	// The drain logs once it has also queued the tenant's held events.
	var (
		stored int64
		drain  float64
	)
	for deadline := time.Now().Add(time.Minute); ; {
		if stored, drain, err = drainsLogged(s.worker.logPath); err == nil || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	if os.Getenv("BENCH_DEBUG_OUTAGE") != "" {
		worst := map[int]time.Duration{}
		for i, due := range res.DueAt {
			k := int((int64(due) - halted.Load()) / int64(100*time.Millisecond))
			worst[k] = max(worst[k], res.Lat[i])
		}
		for k := -5; k < int(total/(100*time.Millisecond)); k++ {
			if worst[k] > 200*time.Millisecond {
				s.logf("outage debug: due %+.1fs after the halt: worst %s", float64(k)/10, worst[k])
			}
		}
	}
	var before, during []time.Duration
	for i, due := range res.DueAt {
		switch {
		case int64(due) < halted.Load():
			before = append(before, res.Lat[i])
		case int64(due) < resumed.Load():
			during = append(during, res.Lat[i])
		}
	}
	out := &Outage{RatePerSec: p.rate, PlannedSeconds: p.outage.Seconds(), OutageSeconds: time.Duration(resumed.Load() - halted.Load()).Seconds(),
		Before: summarize(before), During: summarize(during), Failed: res.Due - res.OK,
		Spooled: spooled, EmptySeconds: empty.Seconds(), DrainSeconds: drain, NormalEventsPerSec: normal}
	out.DrainEventsPerSec = float64(stored) / drain
	if normal > 0 {
		out.Ratio = out.DrainEventsPerSec / normal
		out.Met = out.Failed == 0 && out.Ratio >= outageTargetRatio
	}
	if res.FirstErr != "" {
		s.logf("outage: first failure: %s", res.FirstErr)
	}
	return out, nil
}

func benchBombs(ctx context.Context, s *stack, p outagePlan) (*Bombs, error) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(make([]byte, p.bombDecodedBytes))
	zw.Close()
	bomb := buf.Bytes()
	idle := rssMiB(s.api.pid())
	out := &Bombs{Clients: p.bombClients, Seconds: p.bombFor.Seconds(), DecodedMiB: float64(p.bombDecodedBytes) / (1 << 20),
		SentKiB: float64(len(bomb)) / 1024, IdleRSSMiB: idle, PeakRSSMiB: idle, TargetAboveIdle: bombTargetMiB}
	ctx, cancel := context.WithTimeout(ctx, p.bombFor)
	defer cancel()
	var requests, not413 atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < p.bombClients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req := s.request(ctx, "POST", "/api/track", "", bomb)
				req.Header.Set("Content-Encoding", "gzip")
				res, err := s.http.Do(req)
				if err != nil {
					continue // the deadline
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				requests.Add(1)
				if res.StatusCode != http.StatusRequestEntityTooLarge {
					not413.Add(1)
				}
			}
		}()
	}
	for tick := time.NewTicker(20 * time.Millisecond); ctx.Err() == nil; <-tick.C {
		out.PeakRSSMiB = max(out.PeakRSSMiB, rssMiB(s.api.pid()))
	}
	wg.Wait()
	out.Requests, out.Not413 = requests.Load(), not413.Load()
	out.AboveIdleMiB = out.PeakRSSMiB - out.IdleRSSMiB
	out.Met = out.AboveIdleMiB <= bombTargetMiB && out.Not413 == 0 && out.Requests > 0
	return out, nil
}

// rows adds the outage scenario's rows to the table.
func (o *Outage) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	// The name carries the planned length, not the measured one, so that the row pairs up
	// with the previous full run's.
	name := fmt.Sprintf("tracking through a %.0f s Postgres outage, %.0f req/s", o.PlannedSeconds, o.RatePerSec)
	add(name, "requests not answered 202", float64(o.Failed), nil, nil, "0", b(o.Failed == 0))
	add(name, "s Postgres was down (beside: planned)", o.OutageSeconds, f(o.PlannedSeconds), nil, "", nil)
	add(name, "p99 ms during the outage (beside: before it)", o.During.P99, f(o.Before.P99), f(o.During.P99/o.Before.P99), "", nil)
	add(name, "p50 ms during the outage (beside: before it)", o.During.P50, f(o.Before.P50), nil, "", nil)
	add(name, "events spooled", float64(o.Spooled), nil, nil, "", nil)
	add(name, "s from the restart until the spool is empty (beside: draining)", o.EmptySeconds, f(o.DrainSeconds), nil, "", nil)
	var ratio *float64
	var met *bool
	if o.NormalEventsPerSec > 0 {
		ratio, met = f(o.Ratio), b(o.Met)
	}
	add(name, "spool drain events/s (beside: ingestion at 50/req)", o.DrainEventsPerSec, f(o.NormalEventsPerSec), ratio, fmt.Sprintf("≥ %.1f×", outageTargetRatio), met)
}

// rows adds the bomb scenario's rows to the table.
func (bo *Bombs) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	name := fmt.Sprintf("%d clients posting %.0f KiB gzip → %.0f MiB, %.0f s", bo.Clients, bo.SentKiB, bo.DecodedMiB, bo.Seconds)
	add(name, "api peak RSS MiB above idle (beside: idle)", bo.AboveIdleMiB, f(bo.IdleRSSMiB), nil, fmt.Sprintf("≤ %.0f MiB", bo.TargetAboveIdle), b(bo.Met))
	add(name, "requests, all 413 (beside: answered otherwise)", float64(bo.Requests), f(float64(bo.Not413)), nil, "", nil)
}

// drainsLogged sums the worker's log lines of successful spool drains: events stored and the
// seconds the drains took.
func drainsLogged(path string) (events int64, seconds float64, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var l struct {
			Msg     string  `json:"msg"`
			Events  int64   `json:"events"`
			Seconds float64 `json:"seconds"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "worker: spooled tracking events stored" {
			events, seconds = events+l.Events, seconds+l.Seconds
		}
	}
	if events == 0 || seconds == 0 {
		return 0, 0, fmt.Errorf("outage: the worker's log (%s) has no drain", path)
	}
	return events, seconds, nil
}
