package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A quick run's no-op can measure 0 µs of api CPU (less than /proc's 10 ms tick): the ratio
// over it has no value, and the report must still be written as JSON.
func TestARatioOverAZeroFloorIsLeftOutOfTheReport(t *testing.T) {
	at80 := &FixedRate{OfferedRequestsPerSec: 64, OK: 100, APICPUMicrosPerReq: 1094, MachineCPUMicrosPerReq: 2000}
	noop := &FixedRate{OfferedRequestsPerSec: 64, OK: 100}
	r := &Report{Ingest: []*Ingest{{
		Database: "postgres", EventsPerRequest: 50, EventsPerSec: 4000,
		Floor: &InsertFloor{}, FloorRowsPerSec: 100000, Ratio: 0.04, At80: at80, NoopAt80: noop,
	}}}
	r.buildRows()
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("the report is not JSON: %v", err)
	}
	found := false
	for _, row := range r.Rows {
		if row.Metric == "api CPU µs/request at 80% (beside: no-op)" {
			found = true
			if row.Ratio != nil {
				t.Errorf("ratio over a zero no-op = %v, want none", *row.Ratio)
			}
			if row.Floor == nil || *row.Floor != 0 {
				t.Errorf("floor = %v, want the no-op's 0", row.Floor)
			}
		}
	}
	if !found {
		t.Fatalf("no api CPU row in %+v", r.Rows)
	}
}

// A full run is compared with the last full run kept beside its report: a target is "yes"
// only when both met it, "once" when only this run did, "NO" when this run missed it.
func TestATargetCountsAsMetInTwoConsecutiveFullRuns(t *testing.T) {
	yes, no := true, false
	row := func(metric string, met *bool) Row { return Row{Scenario: "s", Metric: metric, Met: met} }
	out := filepath.Join(t.TempDir(), "latest.json")
	if _, _, ok := (&Report{}).compareWithLastFull(out); ok {
		t.Fatal("compared with a last full run that does not exist")
	}
	last := &Report{Machine: Machine{Revision: "abc", Date: "d"}, Rows: []Row{row("a", &yes), row("b", &no), row("c", &yes)}}
	if err := last.keepAsLastFull(out); err != nil {
		t.Fatal(err)
	}
	r := &Report{Rows: []Row{row("a", &yes), row("b", &yes), row("c", &no), row("new", &yes), row("plain", nil)}}
	rev, _, ok := r.compareWithLastFull(out)
	if !ok || rev != "abc" {
		t.Fatalf("compared: %v with %q, want the kept run abc", ok, rev)
	}
	var got []string
	for _, row := range r.Rows {
		got = append(got, metColumn(row, true))
	}
	if want := []string{"yes", "once", "NO", "once", ""}; !slices.Equal(got, want) {
		t.Errorf("met? column %v, want %v", got, want)
	}
	var b strings.Builder
	r.printRunsSummary(&b, rev, "d")
	if want := "targets: 1 met in this run and in the last full run (abc, d), 2 in this run only (\"once\"), 1 missed\n"; b.String() != want {
		t.Errorf("summary %q, want %q", b.String(), want)
	}
}

// The outage scenario's rows are named by the planned outage, so that two runs whose outages
// lasted a different time pair up; the measured length is a row of its own.
func TestTheOutageScenarioIsNamedByItsPlan(t *testing.T) {
	names := func(o Outage) map[string]float64 {
		got := map[string]float64{}
		o.rows(func(scenario, metric string, value float64, _, _ *float64, _ string, _ *bool) {
			got[scenario+" | "+metric] = value
		})
		return got
	}
	a := names(Outage{RatePerSec: 1000, PlannedSeconds: 30, OutageSeconds: 38.2})
	b := names(Outage{RatePerSec: 1000, PlannedSeconds: 30, OutageSeconds: 42.7})
	if len(a) != len(b) {
		t.Fatalf("%d rows and %d rows", len(a), len(b))
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			t.Fatalf("%q has no pair in the other run: %v", name, b)
		}
	}
	if got := a["tracking through a 30 s Postgres outage, 1000 req/s | s Postgres was down (beside: planned)"]; got != 38.2 {
		t.Fatalf("measured length row: %v (rows %v)", got, a)
	}
}
