// Package ratelimit enforces request budgets that every api process shares: the generic cell
// rate algorithm of github.com/go-redis/redis_rate, whose state lives in Redis, with every
// budget of a request spent in one round trip.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/metrics"
)

// checkTimeout bounds one check's Redis round trip; storeCooldown is how long the store is
// not asked again after a failure. Meanwhile requests are let through: a Redis outage must not
// turn into refused requests.
const (
	checkTimeout  = 100 * time.Millisecond
	storeCooldown = time.Second
)

// Budget is one budget a request spends from: its key and its rate.
type Budget struct {
	Key  string
	Rate config.Rate
	// Peek checks whether one more request would be allowed without spending it.
	Peek bool
}

// Decision is the outcome of one budget's check.
type Decision struct {
	Allowed   bool
	Limit     int           // the budget's N (X-RateLimit-Limit)
	Remaining int           // requests left now (X-RateLimit-Remaining)
	RetryIn   time.Duration // when refused: until the next request is allowed
	At        time.Time     // the limiter's clock when the budget was checked
	Checked   bool          // false: no limit, not reached, or the store was unreachable and the request let through
}

// Limiter checks budgets. It is safe for concurrent use.
type Limiter struct {
	// Timeout bounds one check's round trip, after which the request is let through; New sets
	// 100 ms. Set it before first use.
	Timeout time.Duration

	rdb     redis.UniversalClient
	cluster bool // budgets' keys may be on different nodes: one call per budget
	clock   clock.Clock
	metrics *metrics.Metrics
	store   *breaker.Breaker
}

// New returns a Limiter keeping its state in rdb and reading the time from clk. m may be nil.
func New(rdb redis.UniversalClient, clk clock.Clock, m *metrics.Metrics) *Limiter {
	_, cluster := rdb.(*redis.ClusterClient)
	return &Limiter{rdb: rdb, cluster: cluster, clock: clk, metrics: m, store: &breaker.Breaker{Cooldown: storeCooldown}, Timeout: checkTimeout}
}

// Allow spends one request of each budget, in order, and returns one Decision per budget. It
// stops at the first budget that refuses: the budgets after it are not spent (their Decision
// is allowed and unchecked), exactly as if each had been checked in turn. All the budgets are
// checked atomically in one Redis round trip (on a Redis Cluster, one per budget, in order).
// An "off" rate (or a nil Limiter) allows without a round trip; an unreachable store allows the
// request and counts the failure once per budget.
func (l *Limiter) Allow(ctx context.Context, budgets ...Budget) []Decision {
	out := make([]Decision, len(budgets))
	for i := range out {
		out[i].Allowed = true
	}
	if l == nil {
		return out
	}
	var on []int // indexes of the budgets that limit something
	for i, b := range budgets {
		if !b.Rate.Off() {
			on = append(on, i)
		}
	}
	if len(on) == 0 {
		return out
	}
	now := l.clock.Now()
	if !l.store.Allow(now) { // the store failed just before: let through, and count it
		l.storeFailed(len(on))
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	groups := [][]int{on}
	if l.cluster {
		groups = groups[:0]
		for _, i := range on {
			groups = append(groups, []int{i})
		}
	}
	for g, group := range groups {
		refused, err := l.spend(ctx, now, budgets, group, out)
		if err != nil {
			l.store.Fail(l.clock.Now())
			for _, unchecked := range groups[g:] {
				l.storeFailed(len(unchecked))
			}
			return out
		}
		if refused {
			break
		}
	}
	return out
}

// spend runs the script for the budgets at idx, filling their decisions; refused reports
// whether one of them refused.
func (l *Limiter) spend(ctx context.Context, now time.Time, budgets []Budget, idx []int, out []Decision) (refused bool, err error) {
	keys := make([]string, len(idx))
	args := make([]any, 1, 1+4*len(idx))
	args[0] = strconv.FormatFloat(float64(now.UnixMicro()-epoch2017*1e6)/1e6, 'f', 6, 64)
	for j, i := range idx {
		r := budgets[i].Rate
		keys[j] = keyPrefix + budgets[i].Key
		peek := 0
		if budgets[i].Peek {
			peek = 1
		}
		args = append(args, r.N, r.N, r.Period.Seconds(), peek) // burst = rate: N requests at once, then N per period
	}
	v, err := spendBudgets.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return false, err
	}
	if len(v)%3 != 0 || len(v) == 0 || len(v) > 3*len(idx) {
		return false, fmt.Errorf("ratelimit: %d values from the script", len(v))
	}
	for j := 0; j < len(v)/3; j++ {
		allowed, _ := v[3*j].(int64)
		remaining, _ := v[3*j+1].(int64)
		retry, _ := v[3*j+2].(string)
		d := Decision{Allowed: allowed == 1, Limit: budgets[idx[j]].Rate.N, Remaining: int(remaining), At: now, Checked: true}
		if !d.Allowed {
			secs, err := strconv.ParseFloat(retry, 64)
			if err != nil {
				return false, fmt.Errorf("ratelimit: retry after %q: %w", retry, err)
			}
			d.RetryIn, refused = time.Duration(secs*float64(time.Second)), true
		}
		out[idx[j]] = d
	}
	return refused, nil
}

// storeFailed counts n budgets let through unchecked.
func (l *Limiter) storeFailed(n int) {
	for range n {
		l.metrics.RateLimitStoreError()
	}
}
