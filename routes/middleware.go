package routes

import (
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
			return auth.ErrUnauthenticated
		}
		p, err := s.Auth.Authenticate(c.UserContext(), strings.TrimSpace(token))
		if err != nil {
			return err
		}
		if err := s.limit(c, budget{limitPlatform, strconv.FormatUint(p.TokenID, 10), s.Limits.Platform}); err != nil {
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
