// Command bench measures eventq against its floors, in one run on this machine: it starts its
// own redis-server and Postgres (and uses a SQLite file), builds and runs the real api and
// worker binaries, drives them with an open-loop load generator and prints one table, each
// figure beside the floor measured in the same run, and writes every figure as JSON.
//
//	go run ./bench [-quick] [-out bench/results/latest.json]
//
// Scenarios: (1) GET /api/platform/events of 10,000 queued events vs LRANGE, alone and with 20
// concurrent readers; (2) DELETE ?count=10000 vs LTRIM; (3) POST /api/track, 1 and 50 events
// per request, on Postgres and SQLite, vs the database's multi-row insert floor and the HTTP
// floor (the same api answering POST /bench/noop with the same bodies), with the latency at 80%
// of the sustained rate (-profile records the api's CPU profiles meanwhile); (4) webhook
// acknowledgement at 1,000/s vs GET /healthz; (5) fulfilment of paid sessions on Postgres;
// (6) ingestion and the queue read with the rate limits on vs off; (7) long-poll wake-up, a
// track answering a waiting read while 1,000 others wait; (8) the full queue read with gzip and
// zstd against identity; (9) rebuilding a lost queue from each database; (10) retention: ingestion
// while a prune deletes old days (Postgres partitions dropped, SQLite batched deletes) against
// the same ingestion alone, a day partition dropped vs DELETE, the partitioned table's insert
// rate vs an unpartitioned copy, events export and the migration of an unpartitioned database;
// (12) tracking through a Postgres outage (the spool), and the api's memory while clients post
// gzip bodies that decode to 50 MiB; (11) shared consumption: lease + ack of batches of 100 with 1–8 consumers vs the GET + DELETE
// consumer, with and without 1 ms of work per event, lease latency at the cap of 10,000 leased
// events and while reclaiming expired ones, and Redis memory per leased event.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
)

func main() {
	quick := flag.Bool("quick", false, "shorten every scenario (the whole run takes under a minute)")
	out := flag.String("out", "bench/results/latest.json", "where to write the JSON report")
	keep := flag.Bool("keep", false, "keep the temp dir (api and worker logs, the SQLite file) and print its path")
	profile := flag.Bool("profile", false, "record CPU profiles of the api and the worker during the payment, ingestion and lease scenarios and every fixed-rate measurement, into the temp dir (implies -keep)")
	only := flag.String("only", "", "comma-separated scenarios to run, of "+strings.Join(scenarios, ",")+" (default: all)")
	flag.Parse()
	if flag.NArg() > 0 { // flag stops at the first argument: a flag after it would be dropped
		fmt.Fprintf(os.Stderr, "bench: unexpected argument %q (every option is a flag; see -h)\n", flag.Arg(0))
		os.Exit(2)
	}
	sel, err := parseOnly(*only)
	if err == nil && !tagged && (len(sel) == 0 || sel["checkpoint"]) {
		// Refused at once, not after the half hour of scenarios before it.
		err = errors.New("the checkpoint scenario needs a bench built with -tags bench: run make bench, or go run -tags bench ./bench")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	cmd := strings.TrimSpace("go run ./bench " + strings.Join(os.Args[1:], " "))
	_, err = run(ctx, options{Quick: *quick, Out: *out, Keep: *keep || *profile, Profile: *profile, Only: sel, Command: cmd, Stdout: os.Stdout, Logf: logf})
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "bench: interrupted; everything it started is stopped")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options configure one run.
type options struct {
	Quick   bool
	Out     string // JSON report path; "" writes none
	Keep    bool   // keep the temp dir with the logs
	Profile bool   // CPU profiles of the api and worker during the payment scenarios
	Only    set    // scenarios to run; empty runs them all
	Command string // recorded in the report
	Stdout  io.Writer
	Logf    func(string, ...any)
}

// plan is how long and how hard each scenario runs.
type plan struct {
	rebalance        rebalancePlan
	readIterations   int
	readers          int
	readersFor       time.Duration
	trimIterations   int
	floorFor         time.Duration // each insert floor
	ingest           ingestPlan
	webhookRate      float64
	webhookFor       time.Duration
	webhookAloneFor  time.Duration // the same with the worker stopped, for context
	fulfilSessions   int
	fulfilRate       float64
	fulfilFloorFor   time.Duration
	fulfilWaitAtMost time.Duration
	limits           limitsPlan
	checkpoint       checkpointPlan
	longPollWaiters  int // consumers waiting beside the measured one
	longPollWakeups  int
	codingIterations int // full-queue reads per content coding
	rebuildEvents    int // stored events a rebuild restores, per database
	retention        retentionPlan
	leases           leasePlan
	outage           outagePlan
	frontDoor        frontDoorPlan
	erasure          erasurePlan
	only             set // scenarios to run; empty runs them all

	// Fulfilment below the worker's capacity, and the backlog the capacity is measured on.
	fulfilLowRate     float64
	fulfilLowSessions int
	capacitySessions  int
}

// scenarios are the names -only accepts.
var scenarios = []string{"read", "trim", "ingest-postgres", "ingest-sqlite", "fulfil", "webhook", "limits", "longpoll", "compression", "rebuild", "retention", "leases", "checkpoint", "outage", "bombs", "frontdoor", "erasure", "prune", "citus"}

// set is a set of scenario names.
type set map[string]bool

// parseOnly parses -only's comma-separated list.
func parseOnly(list string) (set, error) {
	out := set{}
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(scenarios, name) {
			return nil, fmt.Errorf("-only: unknown scenario %q (have %s)", name, strings.Join(scenarios, ", "))
		}
		out[name] = true
	}
	return out, nil
}

// runs reports whether the plan includes scenario name.
func (p plan) runs(name string) bool { return len(p.only) == 0 || p.only[name] }

var (
	fullPlan = plan{
		readIterations: 200, readers: 20, readersFor: 10 * time.Second, trimIterations: 100,
		floorFor:    3 * time.Second,
		ingest:      ingestPlan{stepDur: 3 * time.Second, factor: 1.5, maxSteps: 20, refine: 3, start: map[int]float64{1: 200, 50: 8}},
		webhookRate: 1000, webhookFor: 20 * time.Second, webhookAloneFor: 5 * time.Second,
		fulfilSessions: 2000, fulfilRate: 1000, fulfilFloorFor: 3 * time.Second, fulfilWaitAtMost: 2 * time.Minute,
		fulfilLowRate: 200, fulfilLowSessions: 2000, capacitySessions: 5000,
		longPollWaiters: 1000, longPollWakeups: 300, codingIterations: 30, rebuildEvents: 100000,
		retention: fullRetention, leases: fullLeases, outage: fullOutage, frontDoor: fullFrontDoor, erasure: fullErasure,
		limits:     limitsPlan{turns: 8, clients: 64, warmUp: time.Second, ingestFor: 3 * time.Second, reads: 30},
		checkpoint: checkpointPlan{turns: 2, commits: 1500, rows: 1000, perSecond: 140},
		rebalance:  rebalancePlan{tenants: 8, events: 400_000, rate: 1000, aloneFor: 5 * time.Second},
	}
	quickPlan = plan{
		readIterations: 20, readers: 20, readersFor: time.Second, trimIterations: 10,
		floorFor:    300 * time.Millisecond,
		ingest:      ingestPlan{stepDur: 500 * time.Millisecond, factor: 2, maxSteps: 4, start: map[int]float64{1: 400, 50: 10}},
		webhookRate: 1000, webhookFor: 3 * time.Second, webhookAloneFor: time.Second,
		fulfilSessions: 200, fulfilRate: 1000, fulfilFloorFor: 300 * time.Millisecond, fulfilWaitAtMost: 30 * time.Second,
		fulfilLowRate: 200, fulfilLowSessions: 200, capacitySessions: 500,
		longPollWaiters: 100, longPollWakeups: 30, codingIterations: 5, rebuildEvents: 5000,
		retention: quickRetention, leases: quickLeases, outage: quickOutage, frontDoor: quickFrontDoor, erasure: quickErasure,
		limits:     limitsPlan{turns: 2, clients: 64, warmUp: 300 * time.Millisecond, ingestFor: time.Second, reads: 5},
		checkpoint: checkpointPlan{turns: 1, commits: 100, rows: 1000, perSecond: 140},
		rebalance:  rebalancePlan{tenants: 4, events: 4000, rate: 100, aloneFor: time.Second},
	}
)

// run performs the whole benchmark and returns the report; everything it started is stopped
// when it returns, also when ctx is cancelled.
func run(ctx context.Context, o options) (*Report, error) {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	p := fullPlan
	if o.Quick {
		p = quickPlan
	}
	p.only = o.Only
	started := time.Now()
	s, err := newStack(ctx, o.Logf, o.Keep)
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.profile = o.Profile
	rep := &Report{Command: o.Command, Quick: o.Quick, Machine: describeMachine(ctx, s)}

	// First, on a database and a Redis of their own, before any other scenario has loaded the
	// machine: see runPaymentsPhase.
	if err := runPaymentsPhase(ctx, s, p, rep); err != nil {
		return nil, err
	}
	if err := runPostgresPhase(ctx, s, p, rep); err != nil {
		return nil, err
	}
	if err := runCitusPhase(ctx, s, p, rep); err != nil {
		return nil, err
	}
	if err := runHostilePhase(ctx, s, p.outage, p.runs("outage"), p.runs("bombs"), rep); err != nil {
		return nil, err
	}
	if err := runFrontDoorPhase(ctx, s, p, rep); err != nil {
		return nil, err
	}
	if p.runs("erasure") {
		if err := runErasurePhase(ctx, s, p.erasure, rep); err != nil {
			return nil, err
		}
	}
	if p.runs("ingest-sqlite") || p.runs("rebuild") {
		if err := runSQLitePhase(ctx, s, p, rep); err != nil {
			return nil, err
		}
	}
	if p.runs("retention") || p.runs("prune") {
		rp, name := p.retention, "retention"
		if rp.pruneOnly = !p.runs("retention"); rp.pruneOnly {
			name = "prune"
		}
		s.logf("retention: prune under load, drop vs DELETE, partitioned inserts, export, migration (or, with -only prune, the prunes alone)")
		if err := s.measure(name, func() (err error) { rep.Retention, err = benchRetention(ctx, s, rp); return }); err != nil {
			return nil, err
		}
	}
	if p.runs("checkpoint") {
		s.logf("checkpoint: SQLite commits of %d rows at %d a second beside the checkpoint loop, against every %s",
			p.checkpoint.rows, p.checkpoint.perSecond, oldCheckpointEvery)
		if rep.Checkpoint, err = benchCheckpoint(ctx, s, p.checkpoint); err != nil { // no api or worker runs: no peak RSS
			return nil, err
		}
	}
	if p.runs("limits") {
		s.logf("rate limits: ingestion and queue read with the limits off and on, %d turns each", p.limits.turns)
		if err := s.measure("limits", func() (err error) { rep.Limits, err = benchLimits(ctx, s, p.limits); return }); err != nil {
			return nil, err
		}
	}

	rep.Memory = s.peaks.all
	rep.DurationSeconds = time.Since(started).Seconds()
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.buildRows()
	var lastRev, lastDate string
	compared := false
	if o.full() && o.Out != "" {
		lastRev, lastDate, compared = rep.compareWithLastFull(o.Out)
	}
	fmt.Fprintf(o.Stdout, "\neventq bench (%s) — %s, %d CPU, %d MiB, %s, Redis %s, Postgres %s, %s\n\n",
		map[bool]string{true: "quick", false: "full"}[o.Quick], rep.Machine.CPUModel, rep.Machine.NumCPU,
		rep.Machine.MemoryMiB, rep.Machine.GoVersion, rep.Machine.RedisVersion, rep.Machine.PostgresVersion, rep.Machine.Revision)
	rep.printTable(o.Stdout, compared)
	fmt.Fprintf(o.Stdout, "\n%.0f s in all; load average %s at the start, %s at the end\n",
		rep.DurationSeconds, rep.Machine.LoadAvgStart, rep.Machine.LoadAvgEnd)
	fmt.Fprintln(o.Stdout, "\nthe targets alone (docs/performance.md's first table):")
	rep.printTargets(o.Stdout, compared)
	if compared {
		rep.printRunsSummary(o.Stdout, lastRev, lastDate)
	} else if o.full() {
		fmt.Fprintln(o.Stdout, "targets: no earlier full run to compare with; a target counts as met once two consecutive full runs meet it")
	}
	if o.Out != "" {
		if err := rep.writeJSON(o.Out); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Stdout, "wrote %s\n", o.Out)
		if o.full() {
			if err := rep.keepAsLastFull(o.Out); err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

// runPostgresPhase runs the Postgres scenarios but the payment ones (runPaymentsPhase).
func runPostgresPhase(ctx context.Context, s *stack, p plan, rep *Report) error {
	if !slices.ContainsFunc([]string{"read", "compression", "trim", "ingest-postgres", "longpoll", "leases", "rebuild"}, p.runs) {
		return nil
	}
	url, err := s.postgresDatabase("bench")
	if err != nil {
		return err
	}
	if err := s.startServices(ctx, url); err != nil {
		return err
	}
	defer s.stopServices()

	s.logf("seeding tenants and %d queues of %d events", p.readers+1, queueEvents)
	readers := make([]*tenant, p.readers)
	for i := range readers {
		if readers[i], err = s.seedTenant(ctx, "", true); err != nil {
			return err
		}
	}
	trimmer, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return err
	}
	payloads := queuePayloads(readers[0].ID, queueEvents)
	for _, t := range readers {
		if err := fillQueue(ctx, s.rdb, t.ID, payloads); err != nil {
			return err
		}
	}

	if p.runs("read") {
		s.logf("queue read: %d sequential reads, interleaved with LRANGE", p.readIterations)
		if err := s.measure("read", func() (err error) { rep.QueueRead, err = benchQueueRead(ctx, s, readers[0], p.readIterations); return }); err != nil {
			return err
		}
		s.logf("queue read: %d concurrent readers for %s", p.readers, p.readersFor)
		err := s.measure(fmt.Sprintf("read, %d readers", p.readers), func() (err error) {
			rep.QueueReadConc, err = benchQueueReadConcurrent(ctx, s, readers, p.readersFor)
			return
		})
		if err != nil {
			return err
		}
	}
	if p.runs("compression") {
		s.logf("compression: %d full-queue reads each with identity, gzip and zstd", p.codingIterations)
		if err := s.measure("compression", func() (err error) {
			rep.Compression, err = benchCompression(ctx, s, readers[0], p.codingIterations)
			return
		}); err != nil {
			return err
		}
	}
	if p.runs("trim") {
		s.logf("trim: %d DELETEs of a refilled queue, interleaved with LTRIM", p.trimIterations)
		if err := s.measure("trim", func() (err error) { rep.Trim, err = benchTrim(ctx, s, trimmer, payloads, p.trimIterations); return }); err != nil {
			return err
		}
	}
	for _, t := range readers { // give the memory back to the machine
		s.rdb.Del(ctx, eventqueue.Key(t.ID))
	}

	if p.runs("ingest-postgres") {
		if err := s.measure("ingest-postgres", func() error { return runIngest(ctx, s, p, rep) }); err != nil {
			return err
		}
	}
	if p.runs("longpoll") {
		s.logf("long poll: %d wake-ups with %d other reads waiting", p.longPollWakeups, p.longPollWaiters)
		if err := s.measure("longpoll", func() (err error) {
			rep.LongPoll, err = benchLongPoll(ctx, s, p.longPollWaiters, p.longPollWakeups)
			return
		}); err != nil {
			return err
		}
	}
	if p.runs("leases") {
		s.logf("leases: batches of %d with 1–8 consumers vs GET + DELETE, at the cap, reclaiming, memory", leaseBatch)
		if err := s.measure("leases", func() (err error) { rep.Leases, err = benchLeases(ctx, s, p.leases); return }); err != nil {
			return err
		}
	}
	return runRebuild(ctx, s, p, rep, "postgres")
}

// runRebuild measures scenario 9 on the current database.
func runRebuild(ctx context.Context, s *stack, p plan, rep *Report, database string) error {
	if !p.runs("rebuild") {
		return nil
	}
	s.logf("rebuild: %d stored events of a lost queue, %s", p.rebuildEvents, database)
	var r *Rebuild
	err := s.measure("rebuild "+database, func() (err error) { r, err = benchRebuild(ctx, s, database, p.rebuildEvents); return })
	if err != nil {
		return err
	}
	rep.Rebuild = append(rep.Rebuild, r)
	return nil
}

// runSQLitePhase runs the ingestion scenario on SQLite.
func runSQLitePhase(ctx context.Context, s *stack, p plan, rep *Report) error {
	if err := s.startServices(ctx, s.sqliteDatabase("bench")); err != nil {
		return err
	}
	defer s.stopServices()
	if p.runs("ingest-sqlite") {
		if err := s.measure("ingest-sqlite", func() error { return runIngest(ctx, s, p, rep) }); err != nil {
			return err
		}
	}
	return runRebuild(ctx, s, p, rep, "sqlite")
}

// runIngest measures the insert floor of the current database, then ingestion with 1 and
// with 50 events per request, each on its own tenant with UseQueueEvents active.
func runIngest(ctx context.Context, s *stack, p plan, rep *Report) error {
	// Every tenant first: after an overloaded step the database may stay busy for a while.
	tenants := make([]*tenant, 3) // the floor's (without UseQueueEvents), 1/req, 50/req
	for i := range tenants {
		var err error
		if tenants[i], err = s.seedTenant(ctx, "", i > 0); err != nil {
			return err
		}
	}
	s.logf("insert floor (%s each of 100-, 50- and 1-row inserts)", p.floorFor)
	floor, err := measureInsertFloor(ctx, s, tenants[0].ID, p.floorFor)
	if err != nil {
		return err
	}
	s.logf("  floor %s: %.0f rows/s (100-row), %.0f (50-row), %.0f (1-row)", floor.Database, floor.Rows100, floor.Rows50, floor.Rows1)
	var results []*Ingest
	for i, batch := range []int{1, 50} {
		t := tenants[i+1]
		in, err := measureIngest(ctx, s, t, batch, p.ingest, floor)
		if err != nil {
			return err
		}
		results = append(results, in)
		// The api appended every accepted event to the tenant's queue; drop it.
		s.rdb.Del(ctx, eventqueue.Key(t.ID))
	}
	// The floor again, on the fuller table: the ratios use the better of the two figures.
	again, err := measureInsertFloor(ctx, s, tenants[0].ID, p.floorFor)
	if err != nil {
		return err
	}
	s.logf("  floor %s again: %.0f rows/s (100-row), %.0f (50-row), %.0f (1-row)", again.Database, again.Rows100, again.Rows50, again.Rows1)
	floor.Rows100, floor.Rows50, floor.Rows1 = max(floor.Rows100, again.Rows100), max(floor.Rows50, again.Rows50), max(floor.Rows1, again.Rows1)
	for _, in := range results {
		in.FloorRowsPerSec = floor.best()
		in.ratios()
	}
	rep.Ingest = append(rep.Ingest, results...)
	return nil
}
