// Package ratelimit enforces request budgets that every api process shares: the generic cell
// rate algorithm of github.com/go-redis/redis_rate, whose state lives in Redis.
package ratelimit

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
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

// Decision is the outcome of one check.
type Decision struct {
	Allowed   bool
	Limit     int           // the budget's N (X-RateLimit-Limit)
	Remaining int           // requests left now (X-RateLimit-Remaining)
	RetryIn   time.Duration // when refused: until the next request is allowed
	Checked   bool          // false: no limit, or the store was unreachable and the request let through
}

// Limiter checks budgets. It is safe for concurrent use.
type Limiter struct {
	rl      *redis_rate.Limiter
	clock   clock.Clock
	metrics *metrics.Metrics
	store   *breaker.Breaker
}

// New returns a Limiter keeping its state in rdb. m may be nil.
func New(rdb redis.UniversalClient, clk clock.Clock, m *metrics.Metrics) *Limiter {
	return &Limiter{rl: redis_rate.NewLimiter(rdb), clock: clk, metrics: m, store: &breaker.Breaker{Cooldown: storeCooldown}}
}

// Allow spends one request of key's budget under rate. An "off" rate (or a nil Limiter)
// allows everything without a round trip; an unreachable store allows the request and counts
// the failure.
func (l *Limiter) Allow(ctx context.Context, key string, rate config.Rate) Decision {
	if l == nil || rate.Off() {
		return Decision{Allowed: true}
	}
	if !l.store.Allow(l.clock.Now()) { // the store failed just before: let through, and count it
		l.metrics.RateLimitStoreError()
		return Decision{Allowed: true}
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	res, err := l.rl.Allow(ctx, key, redis_rate.Limit{Rate: rate.N, Burst: rate.N, Period: rate.Period})
	if err != nil {
		l.store.Fail(l.clock.Now())
		l.metrics.RateLimitStoreError()
		return Decision{Allowed: true}
	}
	d := Decision{Allowed: res.Allowed > 0, Limit: rate.N, Remaining: res.Remaining, Checked: true}
	if !d.Allowed {
		d.RetryIn = res.RetryAfter
	}
	return d
}
