package main

import (
	"errors"
	"testing"
	"time"
)

// A rate counts as failed only when its step fails twice in a row; a step that passes or
// errs is not run again.
func TestSecondChanceRunsAFailedStepOnceMore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []bool // what each run of the step reports: sustained or not
		err     error
		want    bool
		runs    int
	}{
		{"passes", []bool{true}, nil, true, 1},
		{"fails once then passes", []bool{false, true}, nil, true, 2},
		{"fails twice", []bool{false, false, true}, nil, false, 2},
		{"errs", []bool{false}, errors.New("ctx done"), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, agains := 0, 0
			step := secondChance(func(rate float64) (IngestStep, error) {
				ok := tc.results[runs]
				runs++
				return IngestStep{OfferedRequestsPerSec: rate, Sustainable: ok}, tc.err
			}, func(float64) { agains++ })
			st, err := step(100)
			if !errors.Is(err, tc.err) || st.Sustainable != tc.want || runs != tc.runs || agains != tc.runs-1 {
				t.Fatalf("sustained %v, err %v after %d runs and %d agains; want %v, %v after %d runs",
					st.Sustainable, err, runs, agains, tc.want, tc.err, tc.runs)
			}
		})
	}
}

// A step whose latency grows from its first quarter to its last, as a backlog does, is told
// apart from a steady one, a noisy one and one whose slow requests are at the start.
func TestBacklogIsALatencyThatGrows(t *testing.T) {
	run := func(lat func(i int) time.Duration) loadResult {
		var r loadResult
		for i := range 1000 { // 1,000 requests due over one second
			r.DueAt = append(r.DueAt, time.Duration(i)*time.Millisecond)
			r.Lat = append(r.Lat, lat(i))
		}
		return r
	}
	for _, tc := range []struct {
		name string
		lat  func(i int) time.Duration
		want bool
	}{
		{"steady", func(int) time.Duration { return 5 * time.Millisecond }, false},
		{"noisy", func(i int) time.Duration { return time.Duration(2+i%7*3) * time.Millisecond }, false},
		{"slow start", func(i int) time.Duration { return time.Duration(max(5, 200-i)) * time.Millisecond }, false},
		{"a spike at the end", func(i int) time.Duration { return time.Duration(5+max(0, i-990)*20) * time.Millisecond }, false},
		{"5% over capacity", func(i int) time.Duration { return 5*time.Millisecond + time.Duration(i)*time.Millisecond/20 }, true},
		{"doubling but by 5 ms", func(i int) time.Duration { return time.Duration(2+i/200) * time.Millisecond }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			early, late, growing := run(tc.lat).backlog()
			if growing != tc.want {
				t.Fatalf("p50 %.1f → %.1f ms: growing %v, want %v", early, late, growing, tc.want)
			}
		})
	}
}
