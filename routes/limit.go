package routes

import (
	"math"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/config"
)

// The limits' names: the rate limit key's prefix and the metric's label.
const (
	limitTrack    = "track"
	limitTrackIP  = "track_ip"
	limitPlatform = "platform"
)

var errTooManyAttempts = &apperr.Error{Code: apperr.TooMany, Message: "Too Many Attempts."}

// limit spends one request of key's budget under the named limit. It sets Laravel's
// X-RateLimit-Limit and X-RateLimit-Remaining (when two limits apply, those of the one with
// fewer requests left) and, on refusal, Retry-After and X-RateLimit-Reset, returning
// errTooManyAttempts. An unreachable store lets the request through without headers.
func (s *Server) limit(c *fiber.Ctx, name, key string, rate config.Rate) error {
	d := s.Limiter.Allow(c.UserContext(), name+":"+key, rate)
	if !d.Checked {
		return nil
	}
	remaining := d.Remaining
	if !d.Allowed {
		remaining = 0
	}
	if prev := c.GetRespHeader("X-RateLimit-Remaining"); prev == "" || atoi(prev) >= remaining {
		c.Set("X-RateLimit-Limit", strconv.Itoa(d.Limit))
		c.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	}
	if d.Allowed {
		return nil
	}
	retry := max(1, int64(math.Ceil(d.RetryIn.Seconds())))
	c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(retry, 10))
	c.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Unix()+retry, 10))
	s.Metrics.Limited(c.Route().Path, name)
	return errTooManyAttempts
}

// limitTrackIP is the middleware of POST /api/track's per-address budget: it runs before the
// body is read.
func (s *Server) limitTrackIP(c *fiber.Ctx) error {
	if err := s.limit(c, limitTrackIP, clientIP(c, s.TrustedProxies), s.Limits.TrackIP); err != nil {
		return err
	}
	return c.Next()
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
