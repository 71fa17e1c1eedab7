package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/clock"
)

// TypeMaintainEvents is the storage maintenance of the stored events: day partitions created
// ahead (Postgres) and EVENT_RETENTION applied (retention.Pruner.Maintain), and the dead
// letters' bounds applied to every tenant.
const TypeMaintainEvents = "events:maintain"

// NewMaintainEventsTask returns the maintenance task of the window of length interval
// (EVENT_PRUNE_INTERVAL) that contains now: one run per window, however many workers enqueue
// it. A failed run is not retried; the next window's run tries again.
func NewMaintainEventsTask(now time.Time, interval time.Duration) *asynq.Task {
	return windowTask(TypeMaintainEvents, now, interval, asynq.MaxRetry(0))
}

// MaintainEvents handles TypeMaintainEvents.
func (h *Handlers) MaintainEvents(ctx context.Context, _ *asynq.Task) error {
	if h.Retention == nil {
		return fmt.Errorf("maintain events: no pruner configured: %w", asynq.SkipRetry)
	}
	_, err := h.Retention.Maintain(ctx)
	if err != nil {
		err = fmt.Errorf("maintain events: %w", err)
	}
	if h.DeadLetters != nil {
		if _, derr := h.DeadLetters.PruneDeadLetters(ctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("maintain events: dead letters: %w", derr))
		}
	}
	return err
}

// TriggerMaintainEvents enqueues the maintenance task of the current window until ctx is done:
// one run per interval across all workers, and one as soon as a worker starts.
func TriggerMaintainEvents(ctx context.Context, tasks *asynq.Client, clk clock.Clock, interval time.Duration, log *slog.Logger) {
	triggerWindows(ctx, tasks, clk, interval, NewMaintainEventsTask, log)
}
