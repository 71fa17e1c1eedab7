package cache

import (
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
)

func TestEntriesExpireByTheClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	c := New[string, int](4*time.Second, clk)
	c.Add("a", 1)
	steps := []struct {
		advance time.Duration
		want    bool
	}{
		{0, true},
		{3999 * time.Millisecond, true}, // reading does not extend the entry
		{time.Millisecond, false},       // exactly ttl after it was stored
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		if v, ok := c.Get("a"); ok != s.want || (ok && v != 1) {
			t.Fatalf("after +%s: got %d, %v; want present=%v", s.advance, v, ok, s.want)
		}
	}
	c.Add("a", 2)
	if v, ok := c.Get("a"); !ok || v != 2 {
		t.Fatalf("re-added: %d, %v", v, ok)
	}
	c.Remove("a")
	if _, ok := c.Get("a"); ok {
		t.Fatal("removed entry still there")
	}
}

func TestStaleReturnsExpiredEntriesUntilRemoved(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	c := New[string, int](4*time.Second, clk)
	c.Add("a", 1)
	clk.Advance(time.Hour)
	if _, ok := c.Get("a"); ok {
		t.Fatal("Get returned an expired entry")
	}
	if v, ok := c.Stale("a"); !ok || v != 1 {
		t.Fatalf("Stale: %d, %v", v, ok)
	}
	c.Add("a", 2)
	if v, ok := c.Get("a"); !ok || v != 2 {
		t.Fatalf("after Add: %d, %v", v, ok)
	}
	c.Remove("a")
	if _, ok := c.Stale("a"); ok {
		t.Fatal("Stale returned a removed entry")
	}
	if _, ok := c.Stale("b"); ok {
		t.Fatal("Stale returned an entry never stored")
	}
}
