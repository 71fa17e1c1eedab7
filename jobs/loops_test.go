package jobs

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/hibiken/asynq"
)

// RunLoops starts every loop and returns once each has returned after ctx is done; Loops has
// the reconciliation's trigger only when its interval is set.
func TestRunLoopsWaitsForEveryLoop(t *testing.T) {
	if n, m := len(Loops(LoopDeps{})), len(Loops(LoopDeps{Reconcile: time.Minute})); n != 5 || m != 6 {
		t.Fatalf("%d loops without reconciliation and %d with, want 5 and 6", n, m)
	}
	var started, ended atomic.Int32
	loop := Loop{"test", func(ctx context.Context) {
		started.Add(1)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a loop that takes a moment to end
		ended.Add(1)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { RunLoops(ctx, []Loop{loop, loop, loop}); close(done) }()
	for started.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if ended.Load() != 3 {
		t.Fatalf("RunLoops returned with %d of 3 loops ended", ended.Load())
	}
}

// The re-push and the inbox's drain run once a window however many workers trigger them: two
// workers' triggers, each ticking several times within one window, enqueue one task of each.
func TestTriggersEnqueueOneTaskAWindowAcrossWorkers(t *testing.T) {
	r := testenv.StartRedis(t)
	d := LoopDeps{Tasks: asynq.NewClientFromRedisClient(r.Client()), Clock: clock.NewFake(time.Now()),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 { // two workers
		for _, typ := range []string{TypeRequeueEvents, TypeDrainInbox} {
			wg.Add(1)
			go func() { defer wg.Done(); trigger(ctx, d, typ, frequent) }()
		}
	}
	inspect := asynq.NewInspectorFromRedisClient(r.Client())
	count := func() map[string]int {
		tasks, _ := inspect.ListPendingTasks("default")
		n := map[string]int{}
		for _, task := range tasks {
			n[task.Type]++
		}
		return n
	}
	testenv.Eventually(t, 5*time.Second, "both tasks enqueued", func() bool { return len(count()) == 2 })
	time.Sleep(2500 * time.Millisecond) // two more ticks of every trigger, in the same window
	cancel()
	wg.Wait()
	if n := count(); n[TypeRequeueEvents] != 1 || n[TypeDrainInbox] != 1 {
		t.Fatalf("pending tasks %v, want one of each", n)
	}
}
