package routes

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/jobs"
	"github.com/eventq/eventq/models"
)

// enqueueTimeout bounds the Redis round trip of a webhook; past it the event goes to the
// database inbox, which the worker drains with the same task id, so falling back early costs
// only a few seconds of delay, never a duplicate.
const enqueueTimeout = 300 * time.Millisecond

var webhookAck = []byte(`{"received":true}`)

// webhook answers POST /api/webhooks/psp (and /stripe): 200 whatever happens. A verified
// event of a handled type is enqueued under its event id; if Redis is unreachable it is saved
// to the database inbox for the worker. Nothing else touches the database.
func (s *Server) webhook(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	body := bytes.Clone(c.Body()) // Fiber reuses the buffer; the task outlives the handler
	header := c.Get("PSP-Signature")
	if header == "" {
		header = c.Get("Stripe-Signature")
	}
	ev, err := s.Webhooks.Verify(body, header)
	if err != nil {
		s.Metrics.Webhook(metrics.WebhookBadSignature)
		s.log(c).Warn("webhook refused", "reason", err.Error(), "bytes", len(body))
		return c.Send(webhookAck)
	}
	s.Metrics.Webhook(metrics.WebhookVerified)
	task, err := jobs.NewEventTask(ev.ID, string(ev.Type), body)
	if err != nil {
		s.Metrics.Webhook(metrics.WebhookIgnoredType)
		s.log(c).Info("webhook ignored", "event_id", ev.ID, "type", string(ev.Type))
		return c.Send(webhookAck)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), enqueueTimeout)
	defer cancel()
	_, err = s.Tasks.EnqueueContext(ctx, task)
	switch {
	case err == nil:
		s.Metrics.Webhook(metrics.WebhookEnqueued)
		s.log(c).Info("webhook enqueued", "event_id", ev.ID, "type", string(ev.Type))
	case errors.Is(err, asynq.ErrTaskIDConflict):
		s.Metrics.Webhook(metrics.WebhookDuplicate)
		s.log(c).Info("webhook duplicate", "event_id", ev.ID)
	default:
		s.inbox(c, ev.ID, string(ev.Type), body, err)
	}
	return c.Send(webhookAck)
}

// inbox saves a verified event whose enqueue failed, so the worker can enqueue it later.
func (s *Server) inbox(c *fiber.Ctx, id, typ string, body []byte, cause error) {
	row := models.WebhookInbox{EventID: id, Type: typ, Payload: body}
	err := s.DB.WithContext(context.WithoutCancel(c.UserContext())).
		Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "event_id"}}, DoNothing: true}).Create(&row).Error
	if err != nil {
		s.Metrics.Webhook(metrics.WebhookLost)
		s.log(c).Error("webhook lost: enqueue and inbox both failed", "event_id", id, "enqueue_err", cause, "inbox_err", err)
		return
	}
	s.Metrics.Webhook(metrics.WebhookInboxed)
	s.log(c).Warn("webhook saved to inbox", "event_id", id, "enqueue_err", cause)
}
