package main

import (
	"encoding/json"
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
