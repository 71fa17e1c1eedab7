// Package breaker remembers that a dependency failed, so that callers skip it for a while
// instead of each paying a timeout.
package breaker

import (
	"sync"
	"time"
)

// Breaker is open for Cooldown after each Fail. Its zero value is closed with no cooldown;
// it is safe for concurrent use.
type Breaker struct {
	Cooldown time.Duration

	mu        sync.Mutex
	openUntil time.Time
}

// Allow reports whether the dependency may be tried at now.
func (b *Breaker) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !now.Before(b.openUntil)
}

// Fail opens the breaker for Cooldown from now.
func (b *Breaker) Fail(now time.Time) {
	b.mu.Lock()
	b.openUntil = now.Add(b.Cooldown)
	b.mu.Unlock()
}
