package changes_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/changes"
	"github.com/eventq/eventq/internal/testenv"
)

// pipelines counts the round trips that carry announcements, and holds the first until released.
type pipelines struct {
	n       atomic.Int64
	first   chan struct{} // closed when the first send began
	release chan struct{}
	once    sync.Once
}

func (p *pipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xadd" { // an announcement sent alone
			p.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "xadd" { // the connection's own set-up
			return next(ctx, cmds)
		}
		p.n.Add(1)
		p.once.Do(func() { close(p.first); <-p.release })
		return next(ctx, cmds)
	}
}

// Announcements made while another is being sent go to Redis together: 50 concurrent ones,
// the first held on its way, take two round trips, and every one is in the stream once.
func TestConcurrentAnnouncementsShareARoundTrip(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	hook := &pipelines{first: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(hook)
	feed := changes.NewFeed(rdb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()

	errs := make(chan error, 50)
	go func() { errs <- feed.Announce(ctx, changes.Change{Kind: changes.Entitlements, Tenant: 1, ID: 0}) }()
	<-hook.first // the first is being sent: the others queue behind it
	for i := 1; i < 50; i++ {
		go func() {
			errs <- feed.Announce(ctx, changes.Change{Kind: changes.Entitlements, Tenant: 1, ID: uint64(i)})
		}()
	}
	testenv.Eventually(t, 5*time.Second, "the other 49 wait", func() bool { return feed.Waiting() == 49 })
	close(hook.release)
	for range 50 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := hook.n.Load(); n != 2 {
		t.Errorf("%d round trips for 50 announcements, want 2", n)
	}
	entries, err := rdb.XRange(ctx, changes.Key, "-", "+").Result()
	testenv.Must(t, err)
	seen := map[string]int{}
	for _, e := range entries {
		seen[fmt.Sprint(e.Values["i"])]++
	}
	for i := range 50 {
		if seen[fmt.Sprint(i)] != 1 {
			t.Errorf("change %d is in the stream %d times", i, seen[fmt.Sprint(i)])
		}
	}
}

// With Redis gone, every announcement of a shared send fails, and the next caller sends again.
func TestAnnouncementsFailTogetherAndTheNextSendsAgain(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client()
	feed := changes.NewFeed(rdb, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	r.Stop()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if feed.Announce(ctx, changes.Change{Kind: changes.Member, Tenant: 1, ID: uint64(i)}) != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 10 {
		t.Fatalf("%d of 10 announcements failed with Redis down", failed.Load())
	}
	r.Start()
	if err := feed.Announce(ctx, changes.Change{Kind: changes.Member, Tenant: 1, ID: 99}); err != nil {
		t.Fatalf("after Redis came back: %v", err)
	}
}
