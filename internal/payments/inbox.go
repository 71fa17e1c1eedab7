package payments

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/models"
)

// inboxBatch is how many inbox rows DrainInbox reads at a time.
const inboxBatch = 100

// saveToInbox stores a verified event whose enqueue failed; an event already there is kept.
func (svc *Service) saveToInbox(ctx context.Context, id, typ string, payload []byte) error {
	row := models.WebhookInbox{EventID: id, Type: typ, Payload: payload}
	return svc.DB.WithContext(ctx).
		Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "event_id"}}, DoNothing: true}).Create(&row).Error
}

// DrainInbox enqueues every inbox event through Queue and deletes it from the inbox. An event
// already queued is deleted too. Safe to run concurrently: the task id makes a double enqueue
// a no-op. It stops at the first error; the rest stays in the inbox for the next run.
func (svc *Service) DrainInbox(ctx context.Context) error {
	for {
		var rows []models.WebhookInbox
		if err := svc.DB.WithContext(ctx).Order("id").Limit(inboxBatch).Find(&rows).Error; err != nil {
			return fmt.Errorf("drain inbox: %w", err)
		}
		for _, row := range rows {
			err := svc.Queue.Enqueue(ctx, row.EventID, row.Type, row.Payload)
			if err != nil && !errors.Is(err, ErrAlreadyQueued) {
				return fmt.Errorf("drain inbox: enqueue %s: %w", row.EventID, err)
			}
			if err := svc.DB.WithContext(ctx).Delete(&models.WebhookInbox{}, row.ID).Error; err != nil {
				return fmt.Errorf("drain inbox: delete %s: %w", row.EventID, err)
			}
			svc.Log.Info("inbox event enqueued", "event_id", row.EventID)
		}
		if len(rows) < inboxBatch {
			return nil
		}
	}
}

// InInbox reports whether the verified event id waits in the webhook inbox (its enqueue failed
// and the worker has not enqueued it yet).
func (svc *Service) InInbox(ctx context.Context, id string) (bool, error) {
	var n int64
	err := svc.DB.WithContext(ctx).Model(&models.WebhookInbox{}).Where("event_id = ?", id).Count(&n).Error
	return n > 0, err
}
