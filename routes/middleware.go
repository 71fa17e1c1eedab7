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
		// An address past its budget of failed authentications is refused before a token
		// this process does not know is looked up in the database.
		failures := budget{name: limitAuth, key: s.clientBudgetKey(c), rate: s.Limits.AuthFailures, peek: true}
		if !s.Auth.KnownBearer(bearer) {
			if err := s.limit(c, failures); err != nil {
				return err
			}
		}
		p, err := s.Auth.AuthenticateBearer(c.UserContext(), bearer)
		if errors.Is(err, auth.ErrUnauthenticated) { // spends one failure, with no rate-limit header on the 401
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer error="invalid_token"`)
			failures.peek = false
			s.Limiter.Allow(c.UserContext(), failures.limiterBudget())
		}
		if err != nil {
			return err
		}
		if err := s.limit(c, budget{name: limitPlatform, key: strconv.FormatUint(p.TokenID, 10), rate: s.Limits.Platform}); err != nil {
			return err
		}
		for _, ability := range abilities {
			if !p.Can(ability) {
				return auth.ErrInvalidAbility
			}
		}
		c.Locals(principalKey, p)
		return c.Next()
	}
}

func principal(c *fiber.Ctx) *auth.Principal {
	return c.Locals(principalKey).(*auth.Principal)
}
