package routes

import (
	"math"
	"net/netip"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/ratelimit"
)

// The limits' names: the rate limit key's prefix and the metric's label.
const (
	limitTrack    = "track"
	limitTrackIP  = "track_ip"
	limitPlatform = "platform"
	limitReturn   = "return"
	limitAuth     = "auth_failures"
	// The operator API's failures are counted apart from the platform's.
	limitAdminAuth = "admin_auth_failures"
	// Compressed webhook bodies decoded, per client address (see webhookBody).
	limitWebhookDecode = "webhook_decodes"
)

var errTooManyAttempts = &apperr.Error{Code: apperr.TooMany, Message: "Too Many Attempts."}

// budget is one named limit a request spends from.
type budget struct {
	name, key string
	rate      config.Rate
	// peek decides whether one more request would be allowed, spending nothing; an allowed
	// peek sets no header.
	peek bool
}

// limiterBudget is b as the limiter's: its key prefixed by its name.
func (b budget) limiterBudget() ratelimit.Budget {
	return ratelimit.Budget{Key: b.name + ":" + b.key, Rate: b.rate, Peek: b.peek}
}

// limit spends one request of each budget, in order and in one round trip to the limiter's
// store, stopping at the first that refuses. It sets Laravel's X-RateLimit-Limit and
// X-RateLimit-Remaining (when several limits apply, those of the one with fewer requests
// left) and, on refusal, Retry-After and X-RateLimit-Reset (the limiter's clock), returning
// errTooManyAttempts. An unreachable store lets the request through without headers.
func (s *Server) limit(c *fiber.Ctx, budgets ...budget) error {
	bs := make([]ratelimit.Budget, len(budgets))
	for i, b := range budgets {
		bs[i] = b.limiterBudget()
	}
	remaining := -1
	for i, d := range s.Guard.Limiter.Allow(c.UserContext(), bs...) {
		if !d.Checked {
			continue
		}
		if d.Allowed && budgets[i].peek {
			continue
		}
		left := d.Remaining
		if !d.Allowed {
			left = 0
		}
		if remaining < 0 || remaining >= left {
			remaining = left
			c.Set("X-RateLimit-Limit", strconv.Itoa(d.Limit))
			c.Set("X-RateLimit-Remaining", strconv.Itoa(left))
		}
		if d.Allowed {
			continue
		}
		retry := max(1, int64(math.Ceil(d.RetryIn.Seconds())))
		c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(retry, 10))
		c.Set("X-RateLimit-Reset", strconv.FormatInt(d.At.Unix()+retry, 10))
		s.Metrics.Limited(c.Route().Path, budgets[i].name)
		return errTooManyAttempts
	}
	return nil
}

// budgetKey is the key of a client address's rate-limit budgets: an IPv4 address as is, an
// IPv6 address by its /64 (one subscriber's network, which hands its hosts any address in it:
// keyed by the full address, one /64 would have unlimited budgets).
func budgetKey(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Unmap().Is6() {
		return ip
	}
	p, _ := addr.WithZone("").Prefix(64)
	return p.String()
}

// clientBudgetKey is budgetKey of the caller's address.
func (s *Server) clientBudgetKey(c *fiber.Ctx) string {
	return budgetKey(httpx.ClientIP(c, s.Guard.TrustedProxies))
}
