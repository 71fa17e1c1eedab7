package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/clock"
)

// TypeReconcile lists the provider's recent events and queues those eventq never processed
// (their delivery was lost), through the same tasks as the webhook (payments.Reconciler).
const TypeReconcile = "psp:reconcile"

// reconcilePayload names the interval window a periodic task belongs to.
type reconcilePayload struct {
	Window int64 `json:"window"` // Unix seconds of the window's start
}

// NewReconcileTask returns the periodic reconciliation task of the window of length interval
// that contains now. Its task id names the window, so however many workers enqueue it, the
// window gets one run.
func NewReconcileTask(now time.Time, interval time.Duration) *asynq.Task {
	window := now.Truncate(interval).Unix()
	payload, _ := json.Marshal(reconcilePayload{Window: window})
	return asynq.NewTask(TypeReconcile, payload, asynq.TaskID(fmt.Sprintf("%s:%d", TypeReconcile, window)),
		asynq.MaxRetry(3), asynq.Retention(2*interval), asynq.Timeout(max(interval, 10*time.Minute)))
}

// Reconcile handles TypeReconcile with payments.Reconciler.RunPeriodic.
func (h *Handlers) Reconcile(ctx context.Context, _ *asynq.Task) error {
	if h.Reconciler == nil {
		return fmt.Errorf("reconcile: no provider key configured: %w", asynq.SkipRetry)
	}
	_, err := h.Reconciler.RunPeriodic(ctx)
	return err
}

// TriggerReconcile enqueues the reconciliation task of the current window every interval/10
// (at least every second, at most every minute) until ctx is done. Every worker runs it; the
// window's task id lets only the first enqueue of each window through, so there is one run per
// interval however many workers there are, and a run as soon as a worker starts.
func TriggerReconcile(ctx context.Context, tasks *asynq.Client, clk clock.Clock, interval time.Duration, log *slog.Logger) {
	tick := min(max(interval/10, time.Second), time.Minute)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		_, err := tasks.EnqueueContext(ctx, NewReconcileTask(clk.Now(), interval))
		if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) && ctx.Err() == nil {
			log.Warn("reconcile: could not enqueue the periodic run", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
