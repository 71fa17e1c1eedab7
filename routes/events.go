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
	events, err := s.Queue.Read(c.UserContext(), tenantID)
	if err != nil {
		return err
	}
	size := 64
	for _, e := range events {
		size += len(e) + 1
	}
	buf := make([]byte, 0, size)
	buf = append(buf, `{"data":{"count":`...)
	buf = strconv.AppendInt(buf, int64(len(events)), 10)
	buf = append(buf, `,"events":[`...)
	for i, e := range events {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, e...)
	}
	buf = append(buf, "]}}"...)
	s.Metrics.Read(len(events))
	return c.Send(buf)
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
