// Package cache is the short-lived, bounded cache used for token, flag and site-key lookups.
package cache

import (
	"time"

	"github.com/jellydator/ttlcache/v3"
)

// capacity bounds every cache; the least recently used entry goes first.
const capacity = 100_000

// TTL is a concurrency-safe cache whose entries expire ttl after they were stored; reading an
// entry does not extend it, so a stored value is never trusted for longer than ttl.
type TTL[K comparable, V any] struct {
	c *ttlcache.Cache[K, V]
}

// New returns an empty cache with the given lifetime. It starts no goroutine.
func New[K comparable, V any](ttl time.Duration) *TTL[K, V] {
	return &TTL[K, V]{c: ttlcache.New[K, V](
		ttlcache.WithTTL[K, V](ttl),
		ttlcache.WithCapacity[K, V](capacity),
		ttlcache.WithDisableTouchOnHit[K, V](),
	)}
}

// Get returns the unexpired value stored for key.
func (t *TTL[K, V]) Get(key K) (V, bool) {
	if item := t.c.Get(key); item != nil {
		return item.Value(), true
	}
	var zero V
	return zero, false
}

// Add stores value for key for the cache's lifetime.
func (t *TTL[K, V]) Add(key K, value V) { t.c.Set(key, value, ttlcache.DefaultTTL) }

// Remove forgets key.
func (t *TTL[K, V]) Remove(key K) { t.c.Delete(key) }
