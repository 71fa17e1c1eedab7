package delivery

import (
	"testing"
	"time"

	"github.com/eventq/eventq/internal/breaker"
)

// A database down for every tenant spools every tenant's commits at once; one that fails some
// tenants' commits (a Citus worker node stopped) while others' succeed spools only theirs,
// whatever ingestion's lookups found; and a tenant is tried again after the cooldown.
func TestOutageSpoolsOnlyTheTenantsWhoseCommitsFail(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	t.Run("everything down", func(t *testing.T) {
		o := newOutage(&breaker.Breaker{Cooldown: time.Second})
		o.failed(now, 1, false)
		if !o.down(now, 1) || !o.down(now, 2) {
			t.Fatal("after a failed commit and none succeeding, want every tenant spooled at once")
		}
		if o.down(now.Add(time.Second), 2) {
			t.Fatal("after the cooldown, want tenant 2 tried again")
		}
	})
	t.Run("one node down", func(t *testing.T) {
		all := &breaker.Breaker{Cooldown: time.Second}
		o := newOutage(all)
		o.committed(now.Add(-100 * time.Millisecond)) // tenant 2's, on a node still up
		o.failed(now, 1, false)
		all.Fail(now) // a lookup of tenant 1's erased members failed too
		if !o.down(now, 1) {
			t.Fatal("want tenant 1, whose commit failed, spooled at once")
		}
		if o.down(now.Add(500*time.Millisecond), 2) {
			t.Fatal("want tenant 2 committed: other commits succeed")
		}
		if o.down(now.Add(time.Second), 1) {
			t.Fatal("after the cooldown, want tenant 1 tried again")
		}
	})
	t.Run("a slow commit", func(t *testing.T) {
		o := newOutage(&breaker.Breaker{Cooldown: time.Second})
		o.committed(now.Add(-100 * time.Millisecond))
		o.failed(now, 1, true) // the database as a whole is overloaded
		if !o.down(now.Add(500*time.Millisecond), 2) {
			t.Fatal("after a slow commit, want every tenant spooled at once")
		}
	})
}
