package routes

import (
	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/tracking"
)

// bodyLimit is the most bytes a route's body may hold once decoded: 64 KiB for the tracking
// routes, maxBodyBytes for the rest.
func bodyLimit(path string) int {
	switch path {
	case "/api/track", "/api/platform/track":
		return tracking.MaxBodyBytes
	}
	return maxBodyBytes
}

// isWebhook reports whether path is the provider's webhook, which answers 200 whatever it is
// sent: a body it cannot decode reaches it empty, and its signature check refuses it.
func isWebhook(path string) bool {
	return path == "/api/webhooks/psp" || path == "/api/webhooks/stripe"
}

// decodeBody replaces a request body sent with a Content-Encoding by its decoded form (and
// drops the header), so that handlers read it as a plain body. An unknown coding, or more than
// maxCodings, is 415, a body that decodes past the route's limit 413, a body that is not valid
// in its coding 400. Each route's chain runs it once its limits and authentication passed.
func (s *Server) decodeBody(c *fiber.Ctx) error {
	var keep func(string, error) bool
	if isWebhook(c.Path()) {
		keep = func(header string, err error) bool {
			s.log(c).Warn("webhook body not decoded", "content_encoding", header, "err", err)
			return true
		}
	}
	return httpx.DecodeBody(c, bodyLimit(c.Path()), keep)
}
