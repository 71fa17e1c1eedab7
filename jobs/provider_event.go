package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/internal/payments"
)

// taskRetention keeps a finished task's id (the provider's event id) reserved for longer than
// the provider keeps redelivering it, so a late duplicate is recognised and dropped.
// Reconciliation, which looks further back, also checks the database before it enqueues.
const taskRetention = 25 * time.Hour

// maxRetry is how often a failing provider event task is retried, with RetryDelay between
// attempts.
const maxRetry = 20

// EventTaskType is the task type of provider events of eventType: "psp:" and the event type,
// e.g. "psp:charge.refunded". Every one is handled by HandleProviderEvent; the names are the
// ones earlier versions gave their per-type tasks, so tasks they queued are handled too.
func EventTaskType(eventType string) string { return "psp:" + eventType }

// NewEventTask returns the task that handles a verified provider event; payload is the
// event's JSON. The task id is the event id, whoever enqueues it (webhook, inbox drain,
// reconciliation): enqueueing a duplicate fails with asynq.ErrTaskIDConflict, which means
// "already queued". An event without id is an error.
func NewEventTask(eventID, eventType string, payload []byte) (*asynq.Task, error) {
	if eventID == "" {
		return nil, errors.New("jobs: provider event without id")
	}
	return asynq.NewTask(EventTaskType(eventType), payload, asynq.TaskID(eventID), asynq.MaxRetry(maxRetry),
		asynq.Retention(taskRetention), asynq.Timeout(2*time.Minute)), nil
}

// ProviderEvents is payments.EventTasks on asynq: each event is enqueued as the task
// NewEventTask returns, on the client's Redis.
type ProviderEvents struct {
	tasks *asynq.Client
}

// NewProviderEvents returns a ProviderEvents enqueueing with tasks.
func NewProviderEvents(tasks *asynq.Client) *ProviderEvents { return &ProviderEvents{tasks: tasks} }

// Enqueue implements payments.EventTasks: a task id conflict is payments.ErrAlreadyQueued. It
// blocks for one Redis round trip at most as long as ctx allows.
func (q *ProviderEvents) Enqueue(ctx context.Context, eventID, eventType string, payload []byte) error {
	task, err := NewEventTask(eventID, eventType, payload)
	if err != nil {
		return err
	}
	_, err = q.tasks.EnqueueContext(ctx, task)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("%w: %s", payments.ErrAlreadyQueued, eventID)
	}
	return err
}

// HandleProviderEvent handles the task of every provider event type the payment flow
// handles (payments.HandledTypes): payments.Service.HandleEvent does what the event means. An
// event that can never be processed (payments.ErrRejected) is not retried.
func (h *Handlers) HandleProviderEvent(ctx context.Context, t *asynq.Task) error {
	_, err := h.Payments.HandleEvent(ctx, t.Payload())
	if errors.Is(err, payments.ErrRejected) {
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	return err
}

// RetryDelay is the back-off between attempts of a failed task: 1 s, 2 s, 4 s … capped at
// 5 minutes, plus up to 20% random jitter so retries of many tasks spread out.
func RetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := min(time.Second<<min(n, 9), 5*time.Minute)
	return d + rand.N(d/5+1)
}
