package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/clock"
)

// TypeReconcile lists the provider's recent events and queues those eventq never processed
// (their delivery was lost), through the same tasks as the webhook (payments.Reconciler).
const TypeReconcile = "psp:reconcile"

// NewReconcileTask returns the periodic reconciliation task of the window of length interval
// that contains now: one run per window, however many workers enqueue it.
func NewReconcileTask(now time.Time, interval time.Duration) *asynq.Task {
	return windowTask(TypeReconcile, now, interval, asynq.MaxRetry(3))
}

// Reconcile handles TypeReconcile with payments.Reconciler.RunPeriodic.
func (h *Handlers) Reconcile(ctx context.Context, _ *asynq.Task) error {
	if h.Reconciler == nil {
		return fmt.Errorf("reconcile: no provider key configured: %w", asynq.SkipRetry)
	}
	_, err := h.Reconciler.RunPeriodic(ctx)
	return err
}

// TriggerReconcile enqueues the reconciliation task of the current window until ctx is done
// (triggerWindows): one run per interval across all workers, and one as soon as a worker starts.
func TriggerReconcile(ctx context.Context, tasks *asynq.Client, clk clock.Clock, interval time.Duration, log *slog.Logger) {
	triggerWindows(ctx, tasks, clk, interval, NewReconcileTask, log)
}
