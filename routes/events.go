package routes

import (
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/validate"
)

var emptyRead = []byte(`{"data":{"count":0,"events":[]}}`)

// readEvents answers GET /api/platform/events: up to 10,000 events from the front of the
// tenant's queue, without removing them. The stored JSON of each event is written as is.
func (s *Server) readEvents(c *fiber.Ctx) error {
	tenantID := principal(c).TenantID
	active, err := s.Flags.Active(c.UserContext(), features.UseQueueEvents, tenantID)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if !active {
		return c.Send(emptyRead)
	}
	// The events go straight from the Redis reply into fasthttp's pooled body buffer.
	body := c.Response().BodyWriter()
	n, err := s.Queue.ReadTo(c.UserContext(), tenantID, body, func(count int) {
		var head [64]byte
		b := append(head[:0], `{"data":{"count":`...)
		b = strconv.AppendInt(b, int64(count), 10)
		body.Write(append(b, `,"events":[`...))
	})
	if err != nil {
		c.Response().ResetBody()
		return err
	}
	body.Write([]byte("]}}"))
	s.Metrics.Read(n)
	return nil
}

// trimEvents answers DELETE /api/platform/events?count=N: removes exactly the first N events.
// With UseQueueEvents inactive it is a no-op.
func (s *Server) trimEvents(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	var count int64
	if raw := validate.EmptyToNil(string(c.Context().QueryArgs().Peek("count"))); raw == nil {
		validate.Required(&errs, "count")
	} else {
		count, _ = validate.Integer(&errs, "count", raw, 1)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	tenantID := principal(c).TenantID
	active, err := s.Flags.Active(c.UserContext(), features.UseQueueEvents, tenantID)
	if err != nil {
		return err
	}
	if active {
		if err := s.Queue.Trim(c.UserContext(), tenantID, count); err != nil {
			return err
		}
		s.Metrics.Trimmed(count)
	}
	return c.SendStatus(fiber.StatusNoContent)
}
