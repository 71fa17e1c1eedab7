// Package turns lets a few calls of each key (a tenant) run at once in a process: the queue's
// reads and lease calls, the access export. The others wait their turn, or are refused.
package turns

import (
	"context"
	"sync"
)

// Turns holds each key's turns; the zero value is ready. It is safe for concurrent use.
type Turns struct {
	mu   sync.Mutex
	keys map[uint64]*slots
}

type slots struct {
	held  chan struct{}
	users int // callers holding or waiting for a turn: the entry goes with the last
}

// Wait takes one of key's n turns, waiting for one or for ctx; release gives it back (once).
func (t *Turns) Wait(ctx context.Context, key uint64, n int) (release func(), err error) {
	s := t.join(key, n)
	select {
	case s.held <- struct{}{}:
		return t.releaser(key, s), nil
	case <-ctx.Done():
		t.leave(key, s)
		return nil, ctx.Err()
	}
}

// Try takes one of key's n turns if one is free; ok is false when all are taken.
func (t *Turns) Try(key uint64, n int) (release func(), ok bool) {
	s := t.join(key, n)
	select {
	case s.held <- struct{}{}:
		return t.releaser(key, s), true
	default:
		t.leave(key, s)
		return nil, false
	}
}

// Keys is how many keys have a turn taken or awaited.
func (t *Turns) Keys() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.keys)
}

func (t *Turns) join(key uint64, n int) *slots {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys == nil {
		t.keys = map[uint64]*slots{}
	}
	s := t.keys[key]
	if s == nil {
		s = &slots{held: make(chan struct{}, n)}
		t.keys[key] = s
	}
	s.users++
	return s
}

func (t *Turns) leave(key uint64, s *slots) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.users--; s.users == 0 {
		delete(t.keys, key)
	}
}

func (t *Turns) releaser(key uint64, s *slots) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			<-s.held
			t.leave(key, s)
		})
	}
}
