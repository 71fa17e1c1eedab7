package routes

import (
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/tracking"
)

var errTooLarge = httpx.ErrTooLarge

// trackPublic answers POST /api/track, the browser client's ingestion endpoint, authenticated
// by the tenant's public site key. It spends the client address's budget and then the site
// key's in one round trip; a body that cannot be read spends the address's only, and a refusal
// by the address's budget answers 429 whatever the body.
func (s *Server) trackPublic(c *fiber.Ctx) error {
	var (
		siteKey string
		events  []tracking.Input
		err     error = errTooLarge
	)
	if len(c.Body()) <= tracking.MaxBodyBytes {
		siteKey, events, err = tracking.ParsePublic(c.Body())
	}
	budgets := []budget{{name: limitTrackIP, key: s.clientBudgetKey(c), rate: s.Guard.Limits.TrackIP}}
	if err == nil {
		budgets = append(budgets, budget{name: limitTrack, key: siteKey, rate: s.Guard.Limits.Track})
	}
	if limited := s.limit(c, budgets...); limited != nil {
		return limited
	}
	if err != nil {
		return err
	}
	site, err := s.Tracking.SiteByKey(c.UserContext(), siteKey)
	if err != nil {
		return err
	}
	if err := site.CheckHostnames(events); err != nil {
		return err
	}
	return s.ingest(c, site.TenantID, events)
}

// trackAddressFirst refuses a request whose client address is past its budget before its
// body is decoded (an encoded body costs CPU to decode; a plain one is answered by trackPublic,
// which spends both budgets in one round trip). A body that does not decode spends the
// address's budget as an unreadable plain body does: trackPublic, which would, is not reached.
func (s *Server) trackAddressFirst(c *fiber.Ctx) error {
	if len(c.Request().Header.Peek(fiber.HeaderContentEncoding)) == 0 {
		return c.Next()
	}
	addr := budget{name: limitTrackIP, key: s.clientBudgetKey(c), rate: s.Guard.Limits.TrackIP}
	peek := addr
	peek.peek = true
	if err := s.limit(c, peek); err != nil {
		return err
	}
	err := c.Next()
	if httpx.IsDecodeError(err) {
		if limited := s.limit(c, addr); limited != nil {
			return limited
		}
	}
	return err
}

// trackPlatform answers POST /api/platform/track for server-side callers with a token; their
// events may carry user_agent and ip_address.
func (s *Server) trackPlatform(c *fiber.Ctx) error {
	if len(c.Body()) > tracking.MaxBodyBytes {
		return errTooLarge
	}
	events, err := tracking.ParsePlatform(c.Body())
	if err != nil {
		return err
	}
	return s.ingest(c, principal(c).TenantID, events)
}

func (s *Server) ingest(c *fiber.Ctx, tenantID uint64, events []tracking.Input) error {
	client := tracking.Client{
		UserAgent: utils.CopyString(c.Get(fiber.HeaderUserAgent)),
		IPAddress: httpx.ClientIP(c, s.Guard.TrustedProxies),
	}
	ids, err := s.Tracking.Ingest(c.UserContext(), tenantID, events, client)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(fiber.StatusAccepted).Send(acceptedBody(ids))
}

// acceptedBody is the 202 body {"data":{"ids":[…]}}, the bytes the JSON encoder would write,
// built without it: the ids are UUIDs, which JSON needs no escape for.
func acceptedBody(ids []string) []byte {
	const head, tail = `{"data":{"ids":[`, `]}}`
	b := make([]byte, 0, len(head)+len(tail)+len(ids)*39)
	b = append(b, head...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, id...)
		b = append(b, '"')
	}
	return append(b, tail...)
}
