// Package cache is the short-lived, bounded cache used for token, flag and site-key lookups,
// and the Fallback that answers them from memory while their source is down.
package cache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jellydator/ttlcache/v3"
	"golang.org/x/sync/singleflight"

	"github.com/eventq/eventq/internal/breaker"
	"github.com/eventq/eventq/internal/clock"
)

// capacity bounds every cache; the least recently used entry goes first.
const capacity = 100_000

// TTL is a concurrency-safe cache whose entries expire ttl after they were stored, by its
// clock; reading an entry does not extend it, so a stored value is never trusted for longer
// than ttl. ttlcache keeps the bound and the eviction order; the expiry is checked here, so a
// test's fake clock decides it.
type TTL[K comparable, V any] struct {
	c     *ttlcache.Cache[K, entry[V]]
	ttl   time.Duration
	clock clock.Clock
}

type entry[V any] struct {
	value   V
	expires time.Time
}

// New returns an empty cache with the given lifetime, timed by clk. It starts no goroutine.
func New[K comparable, V any](ttl time.Duration, clk clock.Clock) *TTL[K, V] {
	return &TTL[K, V]{ttl: ttl, clock: clk, c: ttlcache.New[K, entry[V]](
		ttlcache.WithTTL[K, entry[V]](ttlcache.NoTTL),
		ttlcache.WithCapacity[K, entry[V]](capacity),
		ttlcache.WithDisableTouchOnHit[K, entry[V]](),
	)}
}

// Get returns the unexpired value stored for key.
func (t *TTL[K, V]) Get(key K) (V, bool) {
	v, _, ok := t.getLeft(key)
	return v, ok
}

// getLeft is Get, and how long the value has left to live.
func (t *TTL[K, V]) getLeft(key K) (V, time.Duration, bool) {
	if item := t.c.Get(key); item != nil {
		e := item.Value()
		if left := e.expires.Sub(t.clock.Now()); left > 0 {
			return e.value, left, true
		}
	}
	var zero V
	return zero, 0, false
}

// Stale returns the value last stored for key, expired or not: an expired entry stays until
// the capacity bound evicts it or it is removed, for callers that answer from it when the
// source cannot be read (a database outage).
func (t *TTL[K, V]) Stale(key K) (V, bool) {
	if item := t.c.Get(key); item != nil {
		return item.Value().value, true
	}
	var zero V
	return zero, false
}

// Add stores value for key for the cache's lifetime.
func (t *TTL[K, V]) Add(key K, value V) { t.addFor(key, value, t.ttl) }

func (t *TTL[K, V]) addFor(key K, value V, life time.Duration) {
	t.c.Set(key, entry[V]{value: value, expires: t.clock.Now().Add(life)}, ttlcache.NoTTL)
}

// Remove forgets key.
func (t *TTL[K, V]) Remove(key K) { t.c.Delete(key) }

// Fallback is a TTL cache in front of a source that may be down (the database): a key not
// cached, or expired, is loaded with a deadline; when the source is unavailable, the key's
// expired entry answers instead, and for the breaker's cooldown every expired entry answers
// without asking the source, so that requests do not each wait for it in turn.
type Fallback[K comparable, V any] struct {
	*TTL[K, V]
	timeout     time.Duration
	coldTimeout time.Duration
	down        *breaker.Breaker
	unavailable func(error) bool
	loads       singleflight.Group // one load of a key at a time: the others wait for its answer
}

// NewFallback returns an empty Fallback whose entries live ttl by clk. A load waits at most
// timeout when the key's expired entry can answer instead, or the breaker is open, and at most
// coldTimeout when neither: the load's answer is then the only one, and a source that is slow,
// not down, gives it a little later. unavailable says which load errors mean the source is
// down, and opens down.
func NewFallback[K comparable, V any](ttl time.Duration, clk clock.Clock, timeout, coldTimeout time.Duration,
	down *breaker.Breaker, unavailable func(error) bool) *Fallback[K, V] {
	return &Fallback[K, V]{TTL: New[K, V](ttl, clk), timeout: timeout, coldTimeout: coldTimeout, down: down,
		unavailable: unavailable}
}

// Get returns key's unexpired value, else load's (stored), else, when load's error says the
// source is unavailable or the source was just found so, key's expired value. Without one, it
// returns load's error.
func (f *Fallback[K, V]) Get(ctx context.Context, key K, load func(context.Context) (V, error)) (V, error) {
	if v, ok := f.TTL.Get(key); ok {
		return v, nil
	}
	stale, known := f.Stale(key)
	allowed := f.down.Allow(f.clock.Now())
	if known && !allowed {
		return stale, nil
	}
	timeout := f.timeout
	if !known && allowed {
		timeout = f.coldTimeout
	}
	// Callers that miss the same key at once share one load (a burst on a cold cache would
	// otherwise send the source one query each, and make each wait for the others'). The
	// load is not cancelled by the caller that started it going away.
	shared, err, _ := f.loads.Do(fmt.Sprint(key), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		v, err := load(ctx)
		if err == nil {
			f.Add(key, v)
		}
		return v, err
	})
	v, _ := shared.(V)
	if err == nil {
		return v, nil
	}
	if f.unavailable(err) {
		f.down.Fail(f.clock.Now())
		if known {
			return stale, nil
		}
	}
	return v, err
}

// Followed is a cache kept true by a change feed: an entry lives ttl while fresh says the
// feed is followed, Forget drops one on a change, Reset drops all when changes may have been
// missed; while the feed is not followed nothing is cached. A load that raced a Forget or a
// Reset is answered but not stored, so an answer read before a change is never kept after it.
//
// An entry read in the last eighth of the ttl before it expires is answered and loaded again
// in the background, one load at a time per key, so that a key read steadily is renewed
// before it expires and its readers never wait on the source for it. Renewing any earlier
// would load a key more often than its expiry does.
type Followed[K comparable, V any] struct {
	ttl      *TTL[K, V]
	fresh    func() bool
	mu       sync.Mutex
	gen      uint64     // counts Forgets and Resets
	renewing map[K]bool // keys loaded again in the background now
}

// renewTimeout bounds a background renewal's load.
const renewTimeout = 5 * time.Second

// NewFollowed returns an empty Followed whose entries live up to ttl by clk (see life) while
// fresh is true.
func NewFollowed[K comparable, V any](ttl time.Duration, clk clock.Clock, fresh func() bool) *Followed[K, V] {
	return &Followed[K, V]{ttl: New[K, V](ttl, clk), fresh: fresh, renewing: map[K]bool{}}
}

// Get returns key's value from the cache when the feed is followed, else load's.
func (f *Followed[K, V]) Get(ctx context.Context, key K, load func(context.Context) (V, error)) (V, error) {
	fresh := f.fresh()
	if fresh {
		if v, left, ok := f.ttl.getLeft(key); ok {
			if left < f.renewWithin() {
				f.renew(key, load)
			}
			return v, nil
		}
	}
	f.mu.Lock()
	gen := f.gen
	f.mu.Unlock()
	v, err := load(ctx)
	if err != nil || !fresh {
		return v, err
	}
	f.mu.Lock()
	if f.gen == gen {
		f.ttl.addFor(key, v, f.life())
	}
	f.mu.Unlock()
	return v, nil
}

// renewWithin is how long before its expiry a read renews an entry.
func (f *Followed[K, V]) renewWithin() time.Duration { return f.ttl.ttl / 8 }

// renew loads key again in the background unless that is under way, and stores the answer
// unless a Forget or Reset came meanwhile or the feed is no longer followed.
func (f *Followed[K, V]) renew(key K, load func(context.Context) (V, error)) {
	f.mu.Lock()
	if f.renewing[key] {
		f.mu.Unlock()
		return
	}
	f.renewing[key] = true
	gen := f.gen
	f.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), renewTimeout)
		defer cancel()
		v, err := load(ctx)
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.renewing, key)
		if err == nil && f.gen == gen && f.fresh() {
			f.ttl.addFor(key, v, f.life())
		}
	}()
}

// life is an entry's lifetime: the ttl less up to a quarter of it, at random. Entries loaded
// together (a page's members, the answers of a process that just started) then expire over
// the ttl's last quarter instead of in the same instant, when their reloads would all wait on
// the database at once; an entry still never lives longer than the ttl.
func (f *Followed[K, V]) life() time.Duration {
	return f.ttl.ttl - rand.N(f.ttl.ttl/4+1)
}

// Forget drops key's entry.
func (f *Followed[K, V]) Forget(key K) {
	f.mu.Lock()
	f.gen++
	f.ttl.Remove(key)
	f.mu.Unlock()
}

// Reset drops every entry.
func (f *Followed[K, V]) Reset() {
	f.mu.Lock()
	f.gen++
	f.ttl.c.DeleteAll()
	f.mu.Unlock()
}
