package main

import (
	"context"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// citusIngestTarget is the share of single Postgres's ingestion that Citus is to keep on the
// same machine: the coordinator adds a hop to every statement, and its worker nodes share the
// machine's cores with it.
const citusIngestTarget = 0.5

// Citus is what the citus scenario measured beyond ingestion (which goes to Report.Ingest): the
// entitlement check and an erasure, on the cluster.
type Citus struct {
	FrontDoor *FrontDoor `json:"front_door"`
	Erasure   *Erasure   `json:"erasure"`
	Rebalance *Rebalance `json:"rebalance"`
}

// Rebalance is a worker node added under tracking and the shards moved onto it.
type Rebalance struct {
	Tenants       int     `json:"tenants"`
	StoredEvents  int     `json:"stored_events"`
	Placements    int64   `json:"placements_moved"`
	Seconds       float64 `json:"seconds"`
	RatePerSec    float64 `json:"tracking_requests_per_second"`
	Before        Latency `json:"tracking_before"`
	During        Latency `json:"tracking_during"`
	FailedDuring  int     `json:"tracking_failed_during"`
	DroppedDuring int     `json:"tracking_dropped_during"`
	FirstErr      string  `json:"tracking_first_error,omitempty"`
}

// rebalancePlan sizes benchRebalance.
type rebalancePlan struct {
	tenants, events int
	rate            float64
	aloneFor        time.Duration
}

// citusCheckTarget is the share of single Postgres's entitlement checks a second that Citus
// is to keep: the check is answered from the api's memory once read.
const citusCheckTarget = 0.9

// runCitusPhase measures on a Citus cluster (a coordinator and two worker nodes on this
// machine, as make test's) what the other phases measure on single Postgres: ingestion with 1
// and with 50 events a request (runIngest), the entitlement check (benchFrontDoor) and an
// erasure (benchErasure). The report sets each beside single Postgres's of the same run, where
// that ran.
func runCitusPhase(ctx context.Context, s *stack, p plan, rep *Report) error {
	if !p.runs("citus") {
		return nil
	}
	s.logf("citus: a coordinator and %d worker nodes", testenv.CitusWorkers)
	// Every node as durable as the single Postgres it is set beside (stack.go).
	cluster, err := testenv.StartCitus("fsync=on", "synchronous_commit=on", "full_page_writes=on")
	if err != nil {
		return err
	}
	defer cluster.Stop()
	url, err := cluster.CreateDatabase("bench")
	if err != nil {
		return err
	}
	if err := s.startServices(ctx, url); err != nil {
		return err
	}
	defer s.stopServices()
	// The check first, on services and servers as fresh as the frontdoor phase's that it is
	// set beside: after the ingestion, the nodes' own work on what it wrote shared the cores
	// with the check.
	rep.Citus = &Citus{}
	s.logf("citus: the entitlement check")
	if rep.Citus.FrontDoor, err = benchFrontDoor(ctx, s, p.frontDoor, p.ingest); err != nil {
		return err
	}
	before := len(rep.Ingest)
	if err := s.measure("citus", func() error { return runIngest(ctx, s, p, rep) }); err != nil {
		return err
	}
	for _, in := range rep.Ingest[before:] {
		in.Database, in.Floor.Database = "citus", "citus"
	}
	s.logf("citus: an erasure")
	if rep.Citus.Erasure, err = benchErasure(ctx, s, p.erasure); err != nil {
		return err
	}
	rep.Citus.Erasure.Database = "citus"
	rep.Citus.Rebalance, err = benchRebalance(ctx, s, cluster, p.rebalance)
	return err
}

// benchRebalance stores events of several tenants, then tracks at a fixed rate over them
// while a worker node is added and the shards are rebalanced onto it
// (citus_rebalance_start, then citus_rebalance_wait), and compares the latency during the
// moves with the same rate's before them.
func benchRebalance(ctx context.Context, s *stack, cluster *testenv.Postgres, p rebalancePlan) (*Rebalance, error) {
	res := &Rebalance{Tenants: p.tenants, StoredEvents: p.events, RatePerSec: p.rate}
	s.logf("citus rebalance: %d tenants, %d stored events, tracking at %.0f req/s", p.tenants, p.events, p.rate)
	var posts []func(context.Context, int) error
	to := time.Now().UTC().Add(-time.Hour)
	for range p.tenants {
		t, err := s.seedTenant(ctx, "", true)
		if err != nil {
			return nil, err
		}
		if err := fillEvents(ctx, s.dbURL, s.db, t.ID, p.events/p.tenants, to.AddDate(0, 0, -2), to); err != nil {
			return nil, err
		}
		posts = append(posts, poster(s, "/api/track", trackBodies(t.SiteKey, 1, 64)))
	}
	post := func(ctx context.Context, i int) error { return posts[i%len(posts)](ctx, i/len(posts)) }
	res.Before = summarize(openLoop{Rate: p.rate, N: int(p.rate * p.aloneFor.Seconds()), Do: post}.run(ctx).Lat)

	worker, err := cluster.AddWorker("bench")
	if err != nil {
		return nil, err
	}
	defer worker.Stop()
	loadCtx, stopLoad := context.WithCancel(ctx)
	during := make(chan loadResult, 1)
	// Stopping the load stops sending; the requests in flight finish on ctx (cancelled with
	// loadCtx, they would count as failures of the rebalance).
	inFlight := func(_ context.Context, i int) error { return post(ctx, i) }
	go func() { during <- openLoop{Rate: p.rate, N: int(p.rate * 600), Do: inFlight}.run(loadCtx) }()
	start := time.Now()
	err = s.db.WithContext(ctx).Exec("SELECT citus_rebalance_start()").Error
	if err == nil {
		err = s.db.WithContext(ctx).Exec("SELECT citus_rebalance_wait()").Error
	}
	res.Seconds = time.Since(start).Seconds()
	stopLoad()
	d := <-during
	if err != nil {
		return nil, fmt.Errorf("rebalance: %w", err)
	}
	res.During, res.FailedDuring, res.DroppedDuring, res.FirstErr = summarize(d.Lat), d.Failed, d.Dropped, d.FirstErr
	err = s.db.WithContext(ctx).Raw(`SELECT count(*) FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid
		WHERE n.nodeport = ?`, worker.Port).Scan(&res.Placements).Error
	s.logf("  rebalance: %d placements moved in %.1f s; tracking p99 %.1f ms during (%.1f before), %d failed (%s)",
		res.Placements, res.Seconds, res.During.P99, res.Before.P99, res.FailedDuring, res.FirstErr)
	return res, err
}

// citusRows adds, for each Citus ingestion, its events a second against single Postgres's
// with as many events a request, from the same run; the entitlement check's rate against
// single Postgres's, and the erasure's rows.
func citusRows(r *Report, add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	if c := r.Citus; c != nil {
		if f := c.FrontDoor; f != nil && f.Check != nil {
			name := fmt.Sprintf("entitlement check citus (%d members)", f.Members)
			if pg := r.FrontDoor; pg != nil && pg.Check != nil && pg.Check.RequestsPerSec > 0 {
				ratio := f.Check.RequestsPerSec / pg.Check.RequestsPerSec
				met := ratio >= citusCheckTarget
				add(name, "requests/s sustained (beside: single Postgres)", f.Check.RequestsPerSec, &pg.Check.RequestsPerSec, &ratio,
					fmt.Sprintf("≥ %.1f×", citusCheckTarget), &met)
			} else {
				add(name, "requests/s sustained", f.Check.RequestsPerSec, nil, nil, "", nil)
			}
			if a := f.CheckAt80; a != nil {
				add(name, "p99 ms at 80%", a.Latency.P99, nil, nil, "", nil)
			}
		}
		if e := c.Erasure; e != nil {
			e.rows(add)
		}
		if rb := c.Rebalance; rb != nil {
			name := fmt.Sprintf("citus rebalance onto a third node (%dk events, tracking %.0f req/s)", rb.StoredEvents/1000, rb.RatePerSec)
			add(name, fmt.Sprintf("s to move %d shard placements", rb.Placements), rb.Seconds, nil, nil, "", nil)
			ratio := rb.During.P99 / rb.Before.P99
			add(name, "tracking p99 ms during (beside: before)", rb.During.P99, &rb.Before.P99, &ratio, "", nil)
			met := rb.FailedDuring+rb.DroppedDuring == 0
			add(name, "tracking requests failed or dropped during", float64(rb.FailedDuring+rb.DroppedDuring), nil, nil, "0", &met)
		}
	}
	for _, c := range r.Ingest {
		if c.Database != "citus" {
			continue
		}
		for _, pg := range r.Ingest {
			if pg.Database == "postgres" && pg.EventsPerRequest == c.EventsPerRequest && pg.EventsPerSec > 0 {
				ratio, met := c.EventsPerSec/pg.EventsPerSec, c.EventsPerSec/pg.EventsPerSec >= citusIngestTarget
				add(fmt.Sprintf("ingest citus, %d/req", c.EventsPerRequest), "events/s (beside: single Postgres)", c.EventsPerSec,
					&pg.EventsPerSec, &ratio, fmt.Sprintf("≥ %.1f×", citusIngestTarget), &met)
			}
		}
	}
}
