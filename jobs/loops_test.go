package jobs

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// RunLoops starts every loop and returns once each has returned after ctx is done; Loops has
// the reconciliation's trigger only when its interval is set.
func TestRunLoopsWaitsForEveryLoop(t *testing.T) {
	if n, m := len(Loops(LoopDeps{})), len(Loops(LoopDeps{Reconcile: time.Minute})); n != 3 || m != 4 {
		t.Fatalf("%d loops without reconciliation and %d with, want 3 and 4", n, m)
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
