package routes

import (
	"bytes"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
)

var webhookAck = []byte(`{"received":true}`)

// webhook answers POST /api/webhooks/psp (and /stripe): 200 whatever happens.
// payments.Service.Receive verifies the event and queues it for the worker (or saves it to the
// database inbox); this handler counts and logs what it did.
func (s *Server) webhook(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	body := bytes.Clone(c.Body()) // Fiber reuses the buffer; the task outlives the handler
	header := c.Get("PSP-Signature")
	if header == "" {
		header = c.Get("Stripe-Signature")
	}
	r := s.Payments.Receive(c.UserContext(), body, header)
	log := s.log(c)
	if r.Outcome != payments.Refused {
		s.Metrics.Webhook(metrics.WebhookVerified)
	}
	switch r.Outcome {
	case payments.Refused:
		s.Metrics.Webhook(metrics.WebhookBadSignature)
		log.Warn("webhook refused", "reason", r.Err.Error(), "bytes", len(body))
	case payments.Ignored:
		s.Metrics.Webhook(metrics.WebhookIgnoredType)
		log.Info("webhook ignored", "event_id", r.EventID, "type", r.EventType)
	case payments.Enqueued:
		s.Metrics.Webhook(metrics.WebhookEnqueued)
		log.Info("webhook enqueued", "event_id", r.EventID, "type", r.EventType)
	case payments.Duplicate:
		s.Metrics.Webhook(metrics.WebhookDuplicate)
		log.Info("webhook duplicate", "event_id", r.EventID)
	case payments.Inboxed:
		s.Metrics.Webhook(metrics.WebhookInboxed)
		log.Warn("webhook saved to inbox", "event_id", r.EventID, "enqueue_err", r.Err)
	case payments.Lost:
		s.Metrics.Webhook(metrics.WebhookLost)
		log.Error("webhook lost: enqueue and inbox both failed", "event_id", r.EventID, "enqueue_err", r.Err, "inbox_err", r.InboxErr)
	}
	return c.Send(webhookAck)
}
