package consume

import (
	"context"
	"sync"
)

// DefaultTenantReads is how many reads of one tenant's queue an api process serves at once
// when Service.TenantReads is 0.
const DefaultTenantReads = 2

// DefaultTenantLeases is how many lease calls of one tenant an api process lets reach Redis
// at once when Service.TenantLeases is 0.
const DefaultTenantLeases = 4

// gate lets at most n calls of each tenant through at once; the others wait their turn. A
// tenant's many parallel full reads then queue in its own api process instead of taking
// Redis's time, and the connections of the read path, from every other tenant.
type gate struct {
	mu      sync.Mutex
	tenants map[uint64]*tenantGate
}

type tenantGate struct {
	slots chan struct{}
	users int // callers holding or waiting for a slot: the entry goes with the last
}

// enter waits for one of tenantID's n slots, or for ctx; release gives it back (once).
func (g *gate) enter(ctx context.Context, tenantID uint64, n int) (release func(), err error) {
	g.mu.Lock()
	if g.tenants == nil {
		g.tenants = map[uint64]*tenantGate{}
	}
	t := g.tenants[tenantID]
	if t == nil {
		t = &tenantGate{slots: make(chan struct{}, n)}
		g.tenants[tenantID] = t
	}
	t.users++
	g.mu.Unlock()
	leave := func() {
		g.mu.Lock()
		if t.users--; t.users == 0 {
			delete(g.tenants, tenantID)
		}
		g.mu.Unlock()
	}
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-t.slots
			leave()
		})
	}, nil
}
