package jobs

import (
	"context"
	"fmt"

	"github.com/eventq/eventq/internal/delivery"
	"github.com/hibiken/asynq"
)

// TypeRequeueEvents pushes stored events whose queue append failed (Redis was down, or the
// API died between commit and append) to their tenants' queues.
const TypeRequeueEvents = "events:requeue"

// NewRequeueEventsTask returns the task; it has no payload.
func NewRequeueEventsTask() *asynq.Task { return asynq.NewTask(TypeRequeueEvents, nil) }

// RequeueEvents handles TypeRequeueEvents. It is safe to run concurrently with itself.
func (h *Handlers) RequeueEvents(ctx context.Context, _ *asynq.Task) error {
	n, err := h.Delivery.Requeue(ctx, delivery.RequeueMinAge)
	if n > 0 {
		h.Log.Info("requeued pending events", "events", n)
	}
	if err != nil {
		return fmt.Errorf("requeue events: %w", err)
	}
	return nil
}
