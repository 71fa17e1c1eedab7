package routes

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/consume"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// Bounds of the lease, ack and dead-letter parameters (see the contract's "Shared consumption").
const (
	maxLeaseLimit     = 1000
	defaultLeaseLimit = 100
	maxVisibility     = 43200
	defaultVisibility = 30
	maxAckIDs         = 1000
	maxLeaseIDLen     = 128
	maxDeadLimit      = 1000
	defaultDeadLimit  = 100
)

// leaseEvents answers POST /api/platform/events/leases?limit=N&visibility=S&wait=S: up to N
// events leased for S seconds, lowest offset first, held up to wait seconds when none is
// available.
func (s *Server) leaseEvents(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	limit := validate.OptionalInteger(&errs, "limit", query(c, "limit"), 1, maxLeaseLimit, defaultLeaseLimit)
	vis := validate.OptionalInteger(&errs, "visibility", query(c, "visibility"), 1, maxVisibility, defaultVisibility)
	wait := validate.OptionalInteger(&errs, "wait", query(c, "wait"), 0, maxWait, 0)
	if err := errs.Err(); err != nil {
		return err
	}
	leases, err := s.Queues.Lease(c.UserContext(), principal(c).TenantID, consume.LeaseRequest{
		Limit: int(limit), Visibility: time.Duration(vis) * time.Second, Wait: time.Duration(wait) * time.Second,
	})
	if err != nil {
		return err
	}
	b := make([]byte, 0, 256*len(leases.Events)+64)
	b = append(b, `{"data":[`...)
	for i, e := range leases.Events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"lease_id":"`...)
		b = append(b, e.LeaseID...) // hex digits and '-': nothing to escape
		b = append(b, `","offset":`...)
		b = strconv.AppendInt(b, e.Offset, 10)
		b = append(b, `,"deliveries":`...)
		b = strconv.AppendInt(b, e.Deliveries, 10)
		b = append(b, `,"event":`...)
		b = append(b, e.Event...)
		b = append(b, '}')
	}
	b = append(b, `],"expires_at":"`...)
	b = leases.ExpiresAt.UTC().AppendFormat(b, models.TimeFormat)
	b = append(b, `","batch_id":"`...)
	b = append(b, leases.BatchID...) // letters, digits and '-' too
	b = append(b, `"}`...)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}

// ackEvents answers POST /api/platform/events/acks with the JSON body
// {"acks":[id…],"retries":[id…],"extends":[id…],"batches":[id…],"visibility":S}: a status
// per lease id, then one per batch id.
func (s *Server) ackEvents(c *fiber.Ctx) error {
	in := validate.DecodeObject(c.Body())
	var errs apperr.FieldErrors
	var req consume.AckRequest
	total := 0
	for _, f := range []struct {
		name string
		into *[]string
	}{{"acks", &req.Acks}, {"retries", &req.Retries}, {"extends", &req.Extends}, {"batches", &req.Batches}} {
		raw := in[f.name]
		if raw == nil {
			continue
		}
		list, ok := raw.([]any)
		if !ok {
			validate.Add(&errs, f.name, "must be an array.")
			continue
		}
		if total+len(list) > maxAckIDs {
			// One message, the items unchecked: the answer's size and cost do not grow with them.
			validate.Add(&errs, f.name, fmt.Sprintf("must not have more than %d items.", maxAckIDs-total))
			total += len(list)
			continue
		}
		total += len(list)
		for i, v := range list {
			if id, ok := validate.RequiredString(&errs, fmt.Sprintf("%s.%d", f.name, i), v, maxLeaseIDLen); ok {
				*f.into = append(*f.into, id)
			}
		}
	}
	req.Visibility = defaultVisibility * time.Second
	if raw := in["visibility"]; raw != nil {
		if n, ok := validate.Integer(&errs, "visibility", raw, 1); ok {
			if n > maxVisibility {
				validate.Add(&errs, "visibility", fmt.Sprintf("must not be greater than %d.", maxVisibility))
			}
			req.Visibility = time.Duration(n) * time.Second
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	statuses, err := s.Queues.Ack(c.UserContext(), principal(c).TenantID, req)
	if err != nil {
		return err
	}
	return c.JSON(struct {
		Data []consume.AckStatus `json:"data"`
	}{statuses})
}

// readDeadLetters answers GET /api/platform/events/dead-letters?limit=N: the oldest N dead
// letters, oldest first.
func (s *Server) readDeadLetters(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	limit := validate.OptionalInteger(&errs, "limit", query(c, "limit"), 1, maxDeadLimit, defaultDeadLimit)
	if err := errs.Err(); err != nil {
		return err
	}
	dead, err := s.Queues.DeadLetters(c.UserContext(), principal(c).TenantID, int(limit))
	if err != nil {
		return err
	}
	b := append(make([]byte, 0, 512*len(dead)+16), `{"data":[`...)
	for i, d := range dead {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
	}
	b = append(b, "]}"...)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}

// dropDeadLetters answers DELETE /api/platform/events/dead-letters?count=N: removes the
// oldest N dead letters, 204.
func (s *Server) dropDeadLetters(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	count := requiredCount(c, &errs)
	if err := errs.Err(); err != nil {
		return err
	}
	if err := s.Queues.DropDeadLetters(c.UserContext(), principal(c).TenantID, count); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}
