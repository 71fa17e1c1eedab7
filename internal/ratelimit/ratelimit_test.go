package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/testenv"
)

// commandCounter counts the commands a client sends, a pipeline's each.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var start = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func perMinute(n int) config.Rate { return config.Rate{N: n, Period: time.Minute} }

// newTestLimiter returns a Limiter whose checks wait for a busy machine rather than let a
// request through unchecked.
func newTestLimiter(rdb redis.UniversalClient, clk clock.Clock) *Limiter {
	l := New(rdb, clk, nil)
	l.Timeout = time.Minute
	return l
}

// remaining spends one request of b alone and returns what is left of it after that.
func remaining(t *testing.T, l *Limiter, b Budget) int {
	t.Helper()
	d := l.Allow(context.Background(), b)[0]
	if !d.Checked || !d.Allowed {
		t.Fatalf("%s: %+v, want allowed and checked", b.Key, d)
	}
	return d.Remaining
}

// testLimiter runs the behaviour every store must have: exact budgets, in order, decided by
// the limiter's clock.
func testLimiter(t *testing.T, rdb redis.UniversalClient, prefix string) {
	ctx := context.Background()
	t.Run("a refused budget spends nothing of those after it", func(t *testing.T) {
		l := newTestLimiter(rdb, clock.NewFake(start))
		ip, site := Budget{Key: prefix + "ip:a", Rate: perMinute(2)}, Budget{Key: prefix + "site:a", Rate: perMinute(5)}
		for i := 0; i < 2; i++ {
			ds := l.Allow(ctx, ip, site)
			if !ds[0].Allowed || !ds[1].Allowed || ds[0].Remaining != 1-i || ds[1].Remaining != 4-i || ds[1].Limit != 5 {
				t.Fatalf("request %d: %+v", i+1, ds)
			}
		}
		ds := l.Allow(ctx, ip, site)
		if ds[0].Allowed || !ds[0].Checked || ds[0].Remaining != 0 || !ds[1].Allowed || ds[1].Checked {
			t.Fatalf("third request: %+v, want refused by the first budget and the second not checked", ds)
		}
		if left := remaining(t, l, site); left != 2 {
			t.Fatalf("the second budget has %d left after one more request, want 2: the refused request spent it", left)
		}
	})
	t.Run("a peek decides as a spend would and spends nothing", func(t *testing.T) {
		l := newTestLimiter(rdb, clock.NewFake(start))
		b := Budget{Key: prefix + "auth:p", Rate: perMinute(2)}
		peek := b
		peek.Peek = true
		for i := 0; i < 2; i++ {
			for j := 0; j < 3; j++ {
				if d := l.Allow(ctx, peek)[0]; !d.Allowed || !d.Checked {
					t.Fatalf("peek %d after %d spent: %+v", j, i, d)
				}
			}
			remaining(t, l, b)
		}
		if d := l.Allow(ctx, peek)[0]; d.Allowed || !d.Checked {
			t.Fatalf("peek after the budget was spent: %+v, want refused", d)
		}
	})
	t.Run("a budget refusing after another leaves the other spent, as in turn", func(t *testing.T) {
		l := newTestLimiter(rdb, clock.NewFake(start))
		ip, site := Budget{Key: prefix + "ip:b", Rate: perMinute(10)}, Budget{Key: prefix + "site:b", Rate: perMinute(1)}
		if ds := l.Allow(ctx, ip, site); !ds[0].Allowed || !ds[1].Allowed {
			t.Fatalf("first request: %+v", ds)
		}
		if ds := l.Allow(ctx, ip, site); !ds[0].Allowed || ds[1].Allowed || !ds[1].Checked {
			t.Fatalf("second request: %+v, want refused by the second budget", ds)
		}
		if left := remaining(t, l, ip); left != 7 {
			t.Fatalf("the first budget has %d left, want 7", left)
		}
	})
	t.Run("the clock decides when a refused request may retry", func(t *testing.T) {
		clk := clock.NewFake(start)
		l := newTestLimiter(rdb, clk)
		b := Budget{Key: prefix + "site:c", Rate: perMinute(5)} // one request every 12 s, 5 at once
		for i := 0; i < 5; i++ {
			if d := l.Allow(ctx, b)[0]; !d.Allowed {
				t.Fatalf("request %d refused: %+v", i+1, d)
			}
		}
		near := func(d, want time.Duration) bool { return d > want-time.Millisecond && d < want+time.Millisecond }
		if d := l.Allow(ctx, b)[0]; d.Allowed || !near(d.RetryIn, 12*time.Second) || !d.At.Equal(start) {
			t.Fatalf("sixth request: %+v, want refused for 12 s at %s", d, start)
		}
		clk.Advance(11 * time.Second)
		if d := l.Allow(ctx, b)[0]; d.Allowed || !near(d.RetryIn, time.Second) {
			t.Fatalf("11 s later: %+v, want refused for 1 s more", d)
		}
		clk.Advance(time.Second)
		if d := l.Allow(ctx, b)[0]; !d.Allowed || d.Remaining != 0 {
			t.Fatalf("12 s later: %+v, want allowed with none left", d)
		}
	})
	t.Run("concurrent requests spend each budget exactly once each", func(t *testing.T) {
		l := newTestLimiter(rdb, clock.NewFake(start))
		// Rates whose intervals (1.25 s, 62.5 ms) are exact in binary, so that the remaining
		// counts are not off by one from rounding.
		ip, site := Budget{Key: prefix + "ip:d", Rate: perMinute(48)}, Budget{Key: prefix + "site:d", Rate: perMinute(960)}
		var wg sync.WaitGroup
		var allowed atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					ds := l.Allow(ctx, ip, site)
					if !ds[0].Checked {
						t.Errorf("a check failed: %+v", ds)
					}
					if ds[0].Allowed && ds[1].Allowed {
						allowed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if allowed.Load() != 48 {
			t.Fatalf("%d of 200 allowed, want the first budget's 48", allowed.Load())
		}
		if left := remaining(t, l, site); left != 960-49 {
			t.Fatalf("the second budget has %d left, want %d: spent once per allowed request", left, 960-49)
		}
	})
	t.Run("an off budget is neither checked nor spent", func(t *testing.T) {
		l := newTestLimiter(rdb, clock.NewFake(start))
		ds := l.Allow(ctx, Budget{Key: prefix + "ip:e", Rate: config.Rate{}}, Budget{Key: prefix + "site:e", Rate: perMinute(3)})
		if !ds[0].Allowed || ds[0].Checked || !ds[1].Checked || ds[1].Remaining != 2 {
			t.Fatalf("%+v", ds)
		}
	})
}

func TestLimiterOnOneRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client()
	testLimiter(t, rdb, "")

	t.Run("two budgets cost one round trip", func(t *testing.T) {
		counter := &commandCounter{}
		rdb.AddHook(counter)
		l := newTestLimiter(rdb, clock.NewFake(start))
		l.Allow(context.Background(), Budget{Key: "ip:f", Rate: perMinute(5)}, Budget{Key: "site:f", Rate: perMinute(5)}) // loads the script
		before := counter.n.Load()
		for range 10 {
			if ds := l.Allow(context.Background(), Budget{Key: "ip:f", Rate: perMinute(50)}, Budget{Key: "site:f", Rate: perMinute(50)}); !ds[0].Checked || !ds[1].Checked {
				t.Fatalf("%+v", ds)
			}
		}
		if n := counter.n.Load() - before; n != 10 {
			t.Fatalf("%d commands for 10 requests of two budgets, want 10", n)
		}
	})
	t.Run("an unreachable store lets requests through and counts each budget", func(t *testing.T) {
		m := metrics.New()
		l := New(rdb, clock.NewFake(start), m)
		r.Stop()
		defer r.Start()
		for range 2 { // the store failing, then the breaker open
			ds := l.Allow(context.Background(), Budget{Key: "ip:g", Rate: perMinute(1)}, Budget{Key: "site:g", Rate: perMinute(1)})
			if !ds[0].Allowed || ds[0].Checked || !ds[1].Allowed || ds[1].Checked {
				t.Fatalf("%+v", ds)
			}
		}
		if n := testutil.ToFloat64(m.RateLimitDown); n != 4 {
			t.Fatalf("%v store errors counted, want 4: two budgets, twice", n)
		}
	})
}

func TestLimiterOnRedisCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	if a, b := rdb.ClusterKeySlot(ctx, keyPrefix+"ip:a").Val(), rdb.ClusterKeySlot(ctx, keyPrefix+"site:a").Val(); a == b {
		t.Fatalf("the two budgets' keys share slot %d: the test would not cross slots", a)
	}
	testLimiter(t, rdb, "")
}

// BenchmarkAllowTrackBudgets compares a tracking request's two budgets in one call with the
// same two budgets in one call each, as before (and as on a cluster), on one Redis.
func BenchmarkAllowTrackBudgets(b *testing.B) {
	rdb := testenv.StartRedis(b).Client()
	huge := config.Rate{N: 1 << 30, Period: time.Second}
	for _, perBudget := range []bool{false, true} {
		name := map[bool]string{false: "one call", true: "one call per budget"}[perBudget]
		b.Run(name, func(b *testing.B) {
			l := New(rdb, clock.Real{}, nil)
			l.cluster, l.Timeout = perBudget, time.Minute
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if ds := l.Allow(context.Background(), Budget{Key: "ip:bench", Rate: huge}, Budget{Key: "site:bench", Rate: huge}); !ds[1].Checked {
						b.Fatal("not checked")
					}
				}
			})
		})
	}
}
