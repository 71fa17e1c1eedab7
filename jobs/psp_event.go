package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/psp"
)

// taskRetention keeps a finished task's id (the provider's event id) reserved for longer than
// the provider keeps redelivering it, so a late duplicate is recognised and dropped.
// Reconciliation, which looks further back, also checks the database before it enqueues.
const taskRetention = 25 * time.Hour

// maxRetry is how often a failing provider event task is retried, with RetryDelay between
// attempts.
const maxRetry = 20

// EventTaskType maps a provider event type to its task type; ok is false for types eventq
// does not handle.
func EventTaskType(eventType string) (string, bool) {
	switch eventType {
	case psp.EventCheckoutCompleted:
		return TypeCheckoutCompleted, true
	case psp.EventAsyncPaymentSucceeded:
		return TypeCheckoutAsyncPaymentSucceeded, true
	case psp.EventChargeRefunded:
		return TypeChargeRefunded, true
	case psp.EventDisputeCreated:
		return TypeDisputeCreated, true
	}
	return "", false
}

// NewEventTask returns the task that handles a verified provider event; payload is the
// event's JSON. The task id is the event id, whoever enqueues it (webhook, inbox drain,
// reconciliation): enqueueing a duplicate fails with asynq.ErrTaskIDConflict, which means
// "already queued". The error wraps payments.ErrNotHandled.
func NewEventTask(eventID, eventType string, payload []byte) (*asynq.Task, error) {
	typ, ok := EventTaskType(eventType)
	if !ok {
		return nil, fmt.Errorf("jobs: event type %q is not handled: %w", eventType, payments.ErrNotHandled)
	}
	if eventID == "" {
		return nil, fmt.Errorf("jobs: event without id: %w", payments.ErrNotHandled)
	}
	return asynq.NewTask(typ, payload, asynq.TaskID(eventID), asynq.MaxRetry(maxRetry),
		asynq.Retention(taskRetention), asynq.Timeout(2*time.Minute)), nil
}

// EventQueue is payments.EventQueue on asynq: each event is enqueued as the task NewEventTask
// returns, on the client's Redis.
type EventQueue struct {
	tasks *asynq.Client
}

// NewEventQueue returns an EventQueue enqueueing with tasks.
func NewEventQueue(tasks *asynq.Client) *EventQueue { return &EventQueue{tasks: tasks} }

// Enqueue implements payments.EventQueue: a task id conflict is payments.ErrAlreadyQueued, an
// event NewEventTask refuses payments.ErrNotHandled. It blocks for one Redis round trip at
// most as long as ctx allows.
func (q *EventQueue) Enqueue(ctx context.Context, eventID, eventType string, payload []byte) error {
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

// eventOf decodes the provider event a task carries. A payload that is not an event with data
// can never be handled: the error, prefixed with what, says so and stops the retries.
func eventOf(t *asynq.Task, what string) (stripe.Event, error) {
	var ev stripe.Event
	if err := json.Unmarshal(t.Payload(), &ev); err != nil || ev.Data == nil {
		return ev, fmt.Errorf("%s: payload is not an event: %w", what, asynq.SkipRetry)
	}
	return ev, nil
}
