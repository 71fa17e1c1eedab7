package main

import (
	"errors"
	"testing"
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
