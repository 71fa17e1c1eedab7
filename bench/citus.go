package main

import (
	"context"
	"fmt"

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
	before := len(rep.Ingest)
	if err := s.measure("citus", func() error { return runIngest(ctx, s, p, rep) }); err != nil {
		return err
	}
	for _, in := range rep.Ingest[before:] {
		in.Database, in.Floor.Database = "citus", "citus"
	}
	rep.Citus = &Citus{}
	s.logf("citus: the entitlement check")
	if rep.Citus.FrontDoor, err = benchFrontDoor(ctx, s, p.frontDoor, p.ingest); err != nil {
		return err
	}
	s.logf("citus: an erasure")
	if rep.Citus.Erasure, err = benchErasure(ctx, s, p.erasure); err != nil {
		return err
	}
	rep.Citus.Erasure.Database = "citus"
	return nil
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
