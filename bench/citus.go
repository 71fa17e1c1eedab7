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

// runCitusPhase measures ingestion, with 1 and with 50 events a request, on a Citus cluster
// (a coordinator and two worker nodes on this machine, as make test's), as runIngest does on
// single Postgres; the report sets each beside single Postgres's of the same run.
func runCitusPhase(ctx context.Context, s *stack, p plan, rep *Report) error {
	if !p.runs("citus") {
		return nil
	}
	s.logf("citus: a coordinator and %d worker nodes", testenv.CitusWorkers)
	cluster, err := testenv.StartCitus()
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
	return nil
}

// citusRows adds, for each Citus ingestion, its events a second against single Postgres's
// with as many events a request, from the same run.
func citusRows(r *Report, add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
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
