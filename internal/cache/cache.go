// Package cache is the short-lived, bounded cache used for token, flag and site-key lookups.
package cache

import (
	"time"

	"github.com/jellydator/ttlcache/v3"

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
	if item := t.c.Get(key); item != nil {
		if e := item.Value(); t.clock.Now().Before(e.expires) {
			return e.value, true
		}
	}
	var zero V
	return zero, false
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
func (t *TTL[K, V]) Add(key K, value V) {
	t.c.Set(key, entry[V]{value: value, expires: t.clock.Now().Add(t.ttl)}, ttlcache.NoTTL)
}

// Remove forgets key.
func (t *TTL[K, V]) Remove(key K) { t.c.Delete(key) }
