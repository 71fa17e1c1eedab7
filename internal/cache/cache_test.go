package cache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/breaker"
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

// A source that hangs costs a lookup the timeout once: the expired value answers, and for the
// cooldown the source is not asked again.
func TestFallbackAnswersFromMemoryWhileTheSourceIsDown(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	down := &breaker.Breaker{Cooldown: time.Second}
	unavailable := func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
	f := NewFallback[string, int](4*time.Second, clk, 50*time.Millisecond, 200*time.Millisecond, down, unavailable)
	ctx := context.Background()
	calls := 0
	ok := func(v int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { calls++; return v, nil }
	}
	hang := func(ctx context.Context) (int, error) { calls++; <-ctx.Done(); return 0, ctx.Err() }

	if v, err := f.Get(ctx, "a", ok(1)); v != 1 || err != nil || calls != 1 {
		t.Fatalf("first load: %d, %v, %d calls", v, err, calls)
	}
	if v, _ := f.Get(ctx, "a", ok(2)); v != 1 || calls != 1 {
		t.Fatalf("cached: %d, %d calls", v, calls)
	}
	clk.Advance(5 * time.Second) // expired
	start := time.Now()
	if v, err := f.Get(ctx, "a", hang); v != 1 || err != nil || calls != 2 {
		t.Fatalf("source hung: %d, %v, %d calls; want the expired value", v, err, calls)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a hung source cost %s, want about the timeout", took)
	}
	if v, err := f.Get(ctx, "a", hang); v != 1 || err != nil || calls != 2 {
		t.Fatalf("within the cooldown: %d, %v, %d calls; want no call", v, err, calls)
	}
	start = time.Now()
	if _, err := f.Get(ctx, "never", hang); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a key never loaded: %v, want the load's error", err)
	}
	if took := time.Since(start); took >= 200*time.Millisecond {
		t.Fatalf("a key never loaded, the source just found down, waited %s: want the short timeout", took)
	}
	clk.Advance(time.Second) // the cooldown is over: the source is asked again
	if v, err := f.Get(ctx, "a", ok(3)); v != 3 || err != nil || calls != 4 {
		t.Fatalf("after the cooldown: %d, %v, %d calls", v, err, calls)
	}
	failing := func(context.Context) (int, error) { calls++; return 0, errors.New("refused") }
	clk.Advance(5 * time.Second)
	if _, err := f.Get(ctx, "a", failing); err == nil {
		t.Fatal("an error that is not unavailability was answered from memory")
	}
}

// A key with nothing in memory to answer is given the longer timeout while the source is not
// known to be down: a slow answer beats a refusal. An expired key gets the short one (its
// expired entry answers), and so does a key never loaded once the source was found down.
func TestFallbackWaitsLongerWhenNothingElseCanAnswer(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	down := &breaker.Breaker{Cooldown: time.Second}
	unavailable := func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
	f := NewFallback[string, int](time.Second, clk, 50*time.Millisecond, 2*time.Second, down, unavailable)
	ctx := context.Background()
	// slow answers v after 300 ms: later than the short timeout, sooner than the long one.
	slow := func(v int) func(context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			select {
			case <-time.After(300 * time.Millisecond):
				return v, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	if v, err := f.Get(ctx, "a", slow(1)); v != 1 || err != nil {
		t.Fatalf("a slow first load: %d, %v; want its answer", v, err)
	}
	clk.Advance(2 * time.Second) // expired: its entry can answer
	if v, err := f.Get(ctx, "a", slow(2)); v != 1 || err != nil {
		t.Fatalf("a slow load of an expired key: %d, %v; want the expired value at the short timeout", v, err)
	}
	if down.Allow(clk.Now()) {
		t.Fatal("the timed-out load did not open the breaker")
	}
	if _, err := f.Get(ctx, "b", slow(3)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a slow first load while the source was just found down: %v, want the short timeout", err)
	}
	clk.Advance(time.Second) // the cooldown is over
	if v, err := f.Get(ctx, "b", slow(4)); v != 4 || err != nil {
		t.Fatalf("a slow first load after the cooldown: %d, %v; want its answer", v, err)
	}
}

// A Followed cache keeps answers only while its feed is followed, and never keeps one read
// before a Forget or Reset that happened during the read.
func TestFollowedKeepsNoAnswerAChangeRaced(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	fresh := true
	c := NewFollowed[string, int](time.Minute, clk, func() bool { return fresh })
	loads := 0
	load := func(v int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { loads++; return v, nil }
	}
	ctx := context.Background()
	if v, _ := c.Get(ctx, "k", load(1)); v != 1 {
		t.Fatal(v)
	}
	if v, _ := c.Get(ctx, "k", load(2)); v != 1 || loads != 1 {
		t.Fatalf("cached: %d after %d loads", v, loads)
	}
	c.Forget("k")
	// A load during which the key is forgotten (its answer may predate the change).
	v, _ := c.Get(ctx, "k", func(context.Context) (int, error) { loads++; c.Forget("k"); return 3, nil })
	if v != 3 {
		t.Fatal(v)
	}
	if v, _ := c.Get(ctx, "k", load(4)); v != 4 {
		t.Fatalf("the raced answer was kept: %d", v)
	}
	// The same with a Reset.
	c.Forget("k")
	c.Get(ctx, "k", func(context.Context) (int, error) { c.Reset(); return 5, nil })
	if v, _ := c.Get(ctx, "k", load(6)); v != 6 {
		t.Fatalf("the answer raced by a reset was kept: %d", v)
	}
	// Not followed: every Get loads, nothing is kept.
	fresh = false
	if v, _ := c.Get(ctx, "k", load(7)); v != 7 {
		t.Fatalf("answered %d from the cache while the feed is not followed", v)
	}
	if v, _ := c.Get(ctx, "k", load(8)); v != 8 {
		t.Fatal(v)
	}
	fresh = true
	if v, _ := c.Get(ctx, "k", load(9)); v != 6 && v != 9 {
		t.Fatal(v)
	}
	clk.Advance(2 * time.Minute)
	if v, _ := c.Get(ctx, "k", load(10)); v != 10 {
		t.Fatalf("an entry outlived its ttl: %d", v)
	}
}

// Callers missing the same key at once share one load and its answer; the caller that started
// the load going away does not fail the others.
func TestFallbackLoadsAKeyOnceForConcurrentMisses(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	f := NewFallback[string, int](time.Minute, clk, time.Second, time.Second, &breaker.Breaker{Cooldown: time.Second}, func(error) bool { return false })
	var loads atomic.Int32
	release := make(chan struct{})
	load := func(ctx context.Context) (int, error) {
		loads.Add(1)
		select {
		case <-release:
			return 42, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	first, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	got := make([]int, 8)
	errs := make([]error, 8)
	for i := range got {
		ctx := context.Background()
		if i == 0 {
			ctx = first
		}
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = f.Get(ctx, "k", load) }()
	}
	for loads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel() // the first caller gives up; the load goes on for the others
	time.Sleep(10 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads for one key, want 1", n)
	}
	for i := range got {
		if errs[i] != nil || got[i] != 42 {
			t.Fatalf("caller %d: %d, %v", i, got[i], errs[i])
		}
	}
}

// Answers a Followed cache loaded in the same instant expire over the last quarter of its ttl,
// not all at once (2,000 members' entitlement answers expiring together sent 2,000 reads to
// the database in the same moment), and none outlives the ttl.
func TestFollowedAnswersLoadedTogetherExpireSpreadOut(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	c := NewFollowed[int, int](time.Minute, clk, func() bool { return true })
	ctx := context.Background()
	const n = 1000
	for k := range n {
		c.Get(ctx, k, func(context.Context) (int, error) { return k, nil })
	}
	cached := func() int {
		kept := 0
		for k := range n {
			if _, ok := c.ttl.Get(k); ok {
				kept++
			}
		}
		return kept
	}
	clk.Advance(45*time.Second - time.Millisecond)
	if kept := cached(); kept != n {
		t.Fatalf("%d of %d expired before three quarters of the ttl", n-kept, n)
	}
	clk.Advance(7*time.Second + 500*time.Millisecond + time.Millisecond) // halfway through the last quarter
	if kept := cached(); kept < n/4 || kept > 3*n/4 {
		t.Fatalf("%d of %d kept halfway through the last quarter of the ttl, want about half", kept, n)
	}
	clk.Advance(7*time.Second + 500*time.Millisecond)
	if kept := cached(); kept != 0 {
		t.Fatalf("%d of %d outlived the ttl", kept, n)
	}
}

// An entry read shortly before it expires is answered from the cache and loaded again in the
// background, once however many read it, so that a key read steadily never expires; a
// renewal that a change raced, or that ended once the feed was no longer followed, is not kept.
func TestFollowedRenewsAnEntryReadBeforeItExpires(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	var unfollowed atomic.Bool
	c := NewFollowed[string, int](time.Minute, clk, func() bool { return !unfollowed.Load() })
	ctx := context.Background()
	var loads atomic.Int64
	load := func(v int, gate chan struct{}) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { loads.Add(1); <-gate; return v, nil }
	}
	open := make(chan struct{})
	close(open)
	renewed := func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.renewing) == 0 }
	// toLeft moves the clock on until key has left to live (its life is random).
	toLeft := func(key string, left time.Duration) {
		t.Helper()
		_, now, ok := c.ttl.getLeft(key)
		if !ok {
			t.Fatalf("%s is not cached", key)
		}
		clk.Advance(now - left)
	}

	if v, _ := c.Get(ctx, "k", load(1, open)); v != 1 {
		t.Fatal(v)
	}
	toLeft("k", c.renewWithin()+time.Second)
	if v, _ := c.Get(ctx, "k", load(2, open)); v != 1 || loads.Load() != 1 {
		t.Fatalf("before the renewal's time: %d after %d loads, want 1 after 1", v, loads.Load())
	}

	toLeft("k", c.renewWithin()-time.Second)
	gate := make(chan struct{})
	for range 50 {
		if v, _ := c.Get(ctx, "k", load(3, gate)); v != 1 {
			t.Fatalf("answered %d, want the cached 1 at once", v)
		}
	}
	close(gate)
	waitFor(t, renewed)
	if n := loads.Load(); n != 2 {
		t.Fatalf("%d loads for 50 reads shortly before the expiry, want 1", n-1)
	}
	clk.Advance(2 * time.Second) // past the first answer's expiry
	if v, _ := c.Get(ctx, "k", load(4, open)); v != 3 || loads.Load() != 2 {
		t.Fatalf("after the first answer's expiry: %d after %d loads, want the renewed 3 after 2", v, loads.Load())
	}

	// A change during a renewal: its answer is not kept.
	c.Get(ctx, "j", load(5, open))
	toLeft("j", time.Second)
	gate = make(chan struct{})
	c.Get(ctx, "j", load(6, gate))
	c.Forget("j")
	close(gate)
	waitFor(t, renewed)
	if v, _ := c.Get(ctx, "j", load(7, open)); v != 7 {
		t.Fatalf("the renewal raced by a change was kept: %d", v)
	}

	// The feed no longer followed when a renewal ends: its answer is not kept.
	toLeft("j", time.Second)
	gate = make(chan struct{})
	c.Get(ctx, "j", load(8, gate))
	unfollowed.Store(true)
	close(gate)
	waitFor(t, renewed)
	unfollowed.Store(false)
	if v, _ := c.Get(ctx, "j", load(9, open)); v == 8 {
		t.Fatalf("the renewal that ended unfollowed was kept: %d", v)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
