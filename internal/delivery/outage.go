package delivery

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventq/eventq/internal/breaker"
)

// outage says whose commits to spool at once, without waiting for a database that was just
// found unavailable. On one server the database is down for every tenant or for none. On Citus
// a worker node that stops takes only the tenants it holds: their commits fail, while the
// other tenants' go on being committed, and must not be spooled for their company.
//
// So a commit that failed opens its tenant's breaker, and the shared one (which ingestion's
// lookups also open, and by which they answer from memory) only when no commit succeeded
// within the cooldown. On one server, a commit that was slow opens the shared one too: the
// database as a whole is overloaded (the one writer of SQLite, the server's disk), and every
// commit would wait. On Citus a slow commit may be one node's, and counts as a failed one.
// A commit spools at once while its tenant's breaker is open, or while the shared one is open
// and nothing was committed within the cooldown, or it was opened by a slow commit.
type outage struct {
	all      *breaker.Breaker
	cooldown time.Duration

	lastCommit atomic.Int64 // unix nanoseconds of the last commit that succeeded
	slowUntil  atomic.Int64 // unix nanoseconds: a slow commit's cooldown ends

	mu      sync.Mutex
	tenants map[uint64]time.Time // open until
}

func newOutage(all *breaker.Breaker) *outage {
	return &outage{all: all, cooldown: all.Cooldown, tenants: map[uint64]time.Time{}}
}

// down reports whether tenant's commit at now is to be spooled at once.
func (o *outage) down(now time.Time, tenant uint64) bool {
	o.mu.Lock()
	until, ok := o.tenants[tenant]
	if ok && !now.Before(until) {
		delete(o.tenants, tenant)
		ok = false
	}
	o.mu.Unlock()
	if ok || now.UnixNano() < o.slowUntil.Load() {
		return true
	}
	return !o.all.Allow(now) && !o.committedSince(now.Add(-o.cooldown))
}

// failed records that tenant's commit found the database unavailable at now, or, when slow,
// did not answer in time.
func (o *outage) failed(now time.Time, tenant uint64, slow bool) {
	if slow {
		o.slowUntil.Store(now.Add(o.cooldown).UnixNano())
		o.all.Fail(now)
		return
	}
	if o.cooldown > 0 {
		o.mu.Lock()
		o.tenants[tenant] = now.Add(o.cooldown)
		if len(o.tenants) > 1024 { // the expired ones go; the map holds the tenants down now
			for t, until := range o.tenants {
				if !now.Before(until) {
					delete(o.tenants, t)
				}
			}
		}
		o.mu.Unlock()
	}
	if !o.committedSince(now.Add(-o.cooldown)) {
		o.all.Fail(now)
	}
}

// committed records a commit that succeeded at now.
func (o *outage) committed(now time.Time) { o.lastCommit.Store(now.UnixNano()) }

func (o *outage) committedSince(t time.Time) bool { return o.lastCommit.Load() > t.UnixNano() }
