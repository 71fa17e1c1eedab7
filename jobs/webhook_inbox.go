package jobs

import (
	"context"

	"github.com/hibiken/asynq"
)

// TypeDrainInbox enqueues the verified webhook events that the API saved to the database
// inbox because Redis was unreachable when they arrived.
const TypeDrainInbox = "psp:inbox"

// NewDrainInboxTask returns the task; it has no payload.
func NewDrainInboxTask() *asynq.Task { return asynq.NewTask(TypeDrainInbox, nil) }

// DrainInbox handles TypeDrainInbox with payments.Service.DrainInbox: every inbox event is
// enqueued as its task and deleted from the inbox. Safe to run concurrently.
func (h *Handlers) DrainInbox(ctx context.Context, _ *asynq.Task) error {
	return h.Payments.DrainInbox(ctx)
}
