package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/clock"
)

// A worker's periodic work, all of it: each loop runs in every worker until the worker stops.
// Two kinds: triggers enqueue a task for each window of an interval, which runs once however
// many workers trigger it (windowTask); pollers look at a backlog (the spool, pending erasures)
// and take what they may, under the locks their work takes.

// frequent is the interval of the re-push of pending events and of the webhook inbox's drain:
// both catch up work a failure left behind, so a failure costs at most this long.
const frequent = 10 * time.Second

// Loop is one periodic loop; Run returns once ctx is done.
type Loop struct {
	Name string
	Run  func(ctx context.Context)
}

// LoopDeps are what the loops need. Reconcile is 0 when reconciliation is off.
type LoopDeps struct {
	Tasks     *asynq.Client
	Clock     clock.Clock
	Log       *slog.Logger
	Spool     SpoolDrainer
	Erasures  Eraser
	Prune     time.Duration // the stored events' maintenance interval
	Reconcile time.Duration // the provider reconciliation's interval; 0: off
}

// Loops lists every periodic loop of a worker.
func Loops(d LoopDeps) []Loop {
	loops := []Loop{
		{"re-push pending events", func(ctx context.Context) { trigger(ctx, d, TypeRequeueEvents, frequent) }},
		{"drain the webhook inbox", func(ctx context.Context) { trigger(ctx, d, TypeDrainInbox, frequent) }},
		{"maintain stored events", func(ctx context.Context) { TriggerMaintainEvents(ctx, d.Tasks, d.Clock, d.Prune, d.Log) }},
		{"drain the ingestion spool", func(ctx context.Context) { RunSpoolDrain(ctx, d.Spool, d.Log) }},
		{"carry out erasures", func(ctx context.Context) { RunErasures(ctx, d.Erasures, d.Log) }},
	}
	if d.Reconcile > 0 {
		loops = append(loops, Loop{"reconcile with the provider", func(ctx context.Context) {
			TriggerReconcile(ctx, d.Tasks, d.Clock, d.Reconcile, d.Log)
		}})
	}
	return loops
}

// trigger enqueues a task of typ for each window of interval.
func trigger(ctx context.Context, d LoopDeps, typ string, interval time.Duration) {
	triggerWindows(ctx, d.Tasks, d.Clock, interval, func(now time.Time, interval time.Duration) *asynq.Task {
		return windowTask(typ, now, interval, asynq.MaxRetry(0))
	}, d.Log)
}

// RunLoops runs loops until ctx is done and returns once every one has returned.
func RunLoops(ctx context.Context, loops []Loop) {
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); l.Run(ctx) }()
	}
	wg.Wait()
}
