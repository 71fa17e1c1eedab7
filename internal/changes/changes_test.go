package changes_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// recorder keeps what a follower handed over.
type recorder struct {
	mu      sync.Mutex
	changes []changes.Change
	resets  int
}

func (r *recorder) on(c changes.Change) { r.mu.Lock(); r.changes = append(r.changes, c); r.mu.Unlock() }
func (r *recorder) reset()              { r.mu.Lock(); r.resets++; r.mu.Unlock() }
func (r *recorder) snapshot() ([]changes.Change, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes), r.resets
}

// Two followers (two api processes) get every change announced after they started, in order,
// each kind to its own handlers; while Redis is down they are not fresh and their caches are
// reset, and once it is back they follow again, resetting once more (what was announced
// meanwhile is not known to them).
func TestFollowersGetEveryChangeAndResetWhenTheyCannotRead(t *testing.T) {
	r := testenv.StartRedis(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	feed := changes.NewFeed(r.Client(), log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var recs [2]recorder
	var members recorder
	var fls [2]*changes.Follower
	for i := range fls {
		fls[i] = changes.NewFollower(r.Client(), clock.Real{}, log)
		if fls[i].Fresh() {
			t.Fatal("fresh before it ran")
		}
		fls[i].On(changes.Entitlements, recs[i].on, recs[i].reset)
		if i == 0 {
			fls[i].On(changes.Member, members.on, members.reset)
		}
		go fls[i].Run(ctx)
	}
	testenv.Eventually(t, 3*time.Second, "both followers are fresh", func() bool { return fls[0].Fresh() && fls[1].Fresh() })
	for i := uint64(1); i <= 50; i++ {
		testenv.Must(t, feed.Announce(ctx, changes.Change{Kind: changes.Entitlements, Tenant: 7, ID: i}))
	}
	testenv.Must(t, feed.Announce(ctx, changes.Change{Kind: changes.Member, Tenant: 7, ID: 9, Refs: []string{"9", "external:a b", "external:"}}))
	for i := range recs {
		testenv.Eventually(t, 3*time.Second, "every change arrives", func() bool { c, _ := recs[i].snapshot(); return len(c) == 50 })
		got, _ := recs[i].snapshot()
		for j, c := range got {
			if c.Kind != changes.Entitlements || c.Tenant != 7 || c.ID != uint64(j+1) {
				t.Fatalf("follower %d, change %d: %+v", i, j, c)
			}
		}
	}
	testenv.Eventually(t, 3*time.Second, "the member change arrives", func() bool { c, _ := members.snapshot(); return len(c) == 1 })
	if c, _ := members.snapshot(); !slices.Equal(c[0].Refs, []string{"9", "external:a b", "external:"}) || c[0].ID != 9 {
		t.Fatalf("member change %+v", c[0])
	}

	_, before := recs[0].snapshot()
	r.Stop()
	testenv.Eventually(t, 5*time.Second, "not fresh while Redis is down", func() bool { return !fls[0].Fresh() && !fls[1].Fresh() })
	// The reset follows the failed read that made the follower stale, on its own goroutine: a
	// busy machine may run this check between the two.
	testenv.Eventually(t, 5*time.Second, "a reset when the feed could not be read", func() bool {
		_, resets := recs[0].snapshot()
		return resets > before
	})
	r.Start()
	testenv.Eventually(t, 10*time.Second, "fresh again", func() bool { return fls[0].Fresh() && fls[1].Fresh() })
	testenv.Must(t, feed.Announce(ctx, changes.Change{Kind: changes.Entitlements, Tenant: 8, ID: 1}))
	testenv.Eventually(t, 3*time.Second, "a change after the restart arrives", func() bool {
		c, _ := recs[1].snapshot()
		return len(c) == 51 && c[50].Tenant == 8
	})
}

// A nil follower (a process that does not follow) is never fresh.
func TestNilFollowerIsNotFresh(t *testing.T) {
	var fl *changes.Follower
	if fl.Fresh() {
		t.Fatal("fresh")
	}
}

// Run returns as soon as its context ends, even while its read gets no answer (Redis is
// paused): a process's shutdown does not wait for the read. Without it, Run would wait for the
// read's timeout (the block plus ten seconds).
func TestRunReturnsAtOnceWhileItsReadWaits(t *testing.T) {
	r := testenv.StartRedis(t)
	fl := changes.NewFollower(r.Client(), clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan struct{})
	go func() { defer close(returned); fl.Run(ctx) }()
	testenv.Eventually(t, 3*time.Second, "the follower is fresh", fl.Fresh)
	r.Pause()
	defer r.Resume()
	cancel()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its context's end")
	}
}
