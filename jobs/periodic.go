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

// windowTask returns a task of type typ for the window of length interval that contains now.
// Its task id names the window, so however many workers enqueue it, the window gets one run.
func windowTask(typ string, now time.Time, interval time.Duration, opts ...asynq.Option) *asynq.Task {
	window := now.Truncate(interval).Unix()
	payload := fmt.Appendf(nil, `{"window":%d}`, window)
	opts = append([]asynq.Option{asynq.TaskID(fmt.Sprintf("%s:%d", typ, window)), asynq.Retention(2 * interval),
		asynq.Timeout(max(interval, 10*time.Minute))}, opts...)
	return asynq.NewTask(typ, payload, opts...)
}

// triggerWindows enqueues the task newTask returns for the current window every interval/10
// (at least every second, at most every minute) until ctx is done. Every worker runs it; the
// window's task id lets only the first enqueue of each window through, so there is one run per
// interval however many workers there are, and a run as soon as a worker starts.
func triggerWindows(ctx context.Context, tasks *asynq.Client, clk clock.Clock, interval time.Duration,
	newTask func(now time.Time, interval time.Duration) *asynq.Task, log *slog.Logger) {
	tick := min(max(interval/10, time.Second), time.Minute)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		task := newTask(clk.Now(), interval)
		_, err := tasks.EnqueueContext(ctx, task)
		if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) && ctx.Err() == nil {
			log.Warn("could not enqueue a periodic task", "type", task.Type(), "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
