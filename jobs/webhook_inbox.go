package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/eventq/eventq/models"
)

// TypeDrainInbox enqueues the verified webhook events that the API saved to the database
// inbox because Redis was unreachable when they arrived.
const TypeDrainInbox = "psp:inbox"

// NewDrainInboxTask returns the task; it has no payload.
func NewDrainInboxTask() *asynq.Task { return asynq.NewTask(TypeDrainInbox, nil) }

// DrainInbox enqueues every inbox event as its fulfilment task and deletes it from the inbox.
// An event whose task id is already taken was queued before: it is deleted too. Safe to run
// concurrently: the task id makes a double enqueue a no-op.
func (h *Handlers) DrainInbox(ctx context.Context, _ *asynq.Task) error {
	for {
		var rows []models.WebhookInbox
		if err := h.DB.WithContext(ctx).Order("id").Limit(100).Find(&rows).Error; err != nil {
			return fmt.Errorf("drain inbox: %w", err)
		}
		for _, row := range rows {
			task, err := NewEventTask(row.EventID, row.Type, row.Payload)
			if err == nil {
				_, err = h.Tasks.EnqueueContext(ctx, task)
			}
			if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
				return fmt.Errorf("drain inbox: enqueue %s: %w", row.EventID, err)
			}
			if err := h.DB.WithContext(ctx).Delete(&models.WebhookInbox{}, row.ID).Error; err != nil {
				return fmt.Errorf("drain inbox: delete %s: %w", row.EventID, err)
			}
			h.Log.Info("inbox event enqueued", "event_id", row.EventID)
		}
		if len(rows) < 100 {
			return nil
		}
	}
}
