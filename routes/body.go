package routes

import (
	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/tracking"
)

// bodyLimit is the most bytes the body of the route registered at path may hold once decoded:
// 64 KiB for the tracking routes, maxBodyBytes for the rest. path is the matched route's
// (c.Route().Path), never the request's: Fiber matches /API/TRACK and /api/track/ to
// /api/track, and they get its limit.
func bodyLimit(path string) int {
	switch path {
	case "/api/track", "/api/platform/track":
		return tracking.MaxBodyBytes
	}
	return maxBodyBytes
}

// decodeBody replaces a request body sent with a Content-Encoding by its decoded form (and
// drops the header), so that handlers read it as a plain body. An unknown coding, or more than
// maxCodings, is 415, a body that decodes past the route's limit 413, a body that is not valid
// in its coding 400. Each route's chain runs it once its limits and authentication passed.
func (s *Server) decodeBody(c *fiber.Ctx) error {
	return httpx.DecodeBody(c, bodyLimit(c.Route().Path))
}

// webhookBody decodes a webhook body sent with a Content-Encoding only when it comes with a
// signature header and its client address has budget left (RATE_LIMIT_AUTH_FAILURES' rate, a
// budget of its own): the provider never compresses its deliveries, and decoding whatever
// anyone posts there, before any signature is checked, would spend the api's CPU for nobody.
// Otherwise, or when the body does not decode, the handler sees an empty body, which its
// signature check refuses. Every webhook request is answered 200 all the same.
func (s *Server) webhookBody(c *fiber.Ctx) error {
	if len(c.Request().Header.Peek(fiber.HeaderContentEncoding)) == 0 {
		return c.Next()
	}
	signed := c.Get("PSP-Signature") != "" || c.Get("Stripe-Signature") != ""
	if signed {
		b := budget{name: limitWebhookDecode, key: s.clientBudgetKey(c), rate: s.Guard.Limits.AuthFailures}
		signed = s.Guard.Limiter.Allow(c.UserContext(), b.limiterBudget())[0].Allowed
	}
	if signed {
		err := httpx.DecodeBody(c, bodyLimit(c.Route().Path))
		if !httpx.IsDecodeError(err) {
			return err // decoded, and the handler ran
		}
	}
	c.Request().Header.Del(fiber.HeaderContentEncoding)
	c.Request().SetBodyRaw(nil)
	return c.Next()
}
