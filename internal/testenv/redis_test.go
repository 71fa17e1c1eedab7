package testenv

import (
	"context"
	"fmt"
	"testing"
)

// A test's Redis killed with SIGKILL comes back with every write it had answered: the
// outage tests count on it.
func TestRedisKeepsEveryAnsweredWriteThroughAKill(t *testing.T) {
	r := StartRedis(t)
	c := r.Client()
	ctx := context.Background()
	const n = 500
	for i := range n {
		Must(t, c.RPush(ctx, "answered", fmt.Sprint(i)).Err())
	}
	r.Kill()
	r.Start()
	got, err := c.LRange(ctx, "answered", 0, -1).Result()
	Must(t, err)
	if len(got) != n || got[0] != "0" || got[n-1] != fmt.Sprint(n-1) {
		t.Fatalf("after a kill: %d writes kept (first %q), want all %d", len(got), got[:min(1, len(got))], n)
	}
}
