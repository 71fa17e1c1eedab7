package retention

import (
	"testing"
	"time"
)

// A SQLite prune's steps shrink when a step holds the write lock over twice sqliteStep, grow
// when it holds it under half, and stay between minBatch and maxBatch rows.
func TestSQLiteStepsFollowTheirTime(t *testing.T) {
	for _, c := range []struct {
		batch int
		took  time.Duration
		want  int
	}{
		{200, 10 * sqliteStep, 100},
		{200, 2*sqliteStep + time.Microsecond, 100},
		{200, 2 * sqliteStep, 200},
		{200, sqliteStep, 200},
		{200, sqliteStep / 2, 200},
		{200, sqliteStep/2 - time.Microsecond, 400},
		{minBatch, time.Second, minBatch},
		{minBatch + 1, time.Second, minBatch},
		{maxBatch, 0, maxBatch},
		{maxBatch - 1, 0, maxBatch},
	} {
		if got := nextBatch(c.batch, c.took); got != c.want {
			t.Errorf("nextBatch(%d, %s) = %d, want %d", c.batch, c.took, got, c.want)
		}
	}
}
