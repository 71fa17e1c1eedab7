package routes

import (
	"errors"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/auth"
)

const principalKey = "principal"

// token authenticates a Sanctum bearer token and requires every one of abilities, as
// "auth:sanctum" plus "abilities:<a>,<b>" would.
func (s *Server) token(abilities ...string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		header := c.Get(fiber.HeaderAuthorization)
		scheme, token, ok := strings.Cut(header, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			// The body is Laravel's; the header says what was expected (RFC 6750), for a
			// client that sent the token bare or under another scheme.
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer error="invalid_request", error_description="send Authorization: Bearer <token>"`)
			return auth.ErrUnauthenticated
		}
		bearer := auth.ParseBearer(strings.TrimSpace(token))
		// The token is checked whatever the address's failures (one lookup by primary key,
		// cached): a valid one is always served, so that garbage from a shared address locks
		// nobody out. Only a token that does not verify spends the failure budget.
		p, err := s.Guard.Auth.AuthenticateBearer(c.UserContext(), bearer)
		if errors.Is(err, auth.ErrUnauthenticated) {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer error="invalid_token"`)
			return s.authFailure(c, limitAuth)
		}
		if err != nil {
			return err
		}
		if err := s.limit(c, budget{name: limitPlatform, key: strconv.FormatUint(p.TokenID, 10), rate: s.Guard.Limits.Platform}); err != nil {
			return err
		}
		for _, ability := range abilities {
			if !p.Can(ability) {
				return auth.ErrInvalidAbility
			}
		}
		c.Locals(principalKey, p)
		return s.decodeBody(c)
	}
}

func principal(c *fiber.Ctx) *auth.Principal {
	return c.Locals(principalKey).(*auth.Principal)
}

// authFailure spends one failed authentication of the caller's address from the named budget
// and answers 401, or 429 once the budget is spent (then nothing more is spent). The
// platform's and the operator API's failures are separate budgets, so that a flood of one
// never refuses the other.
func (s *Server) authFailure(c *fiber.Ctx, name string) error {
	failures := budget{name: name, key: s.clientBudgetKey(c), rate: s.Guard.Limits.AuthFailures, peek: true}
	if err := s.limit(c, failures); err != nil {
		return err
	}
	failures.peek = false
	s.Guard.Limiter.Allow(c.UserContext(), failures.limiterBudget()) // no rate-limit header on a 401
	return auth.ErrUnauthenticated
}
