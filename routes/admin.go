package routes

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// The operator API (/api/admin/*): tenants, their tokens and features, for the platform's
// back office, with one of ADMIN_API_TOKENS.

// admin guards every /api/admin path: 404 when no operator token is configured (there is no
// operator API), else 401 unless the bearer token is one of them. A wrong token spends the
// address's operator budget of RATE_LIMIT_AUTH_FAILURES (429 past it); a right one is served
// whatever that budget says.
func (s *Server) admin(c *fiber.Ctx) error {
	if len(s.Operator.AdminTokens) == 0 {
		return apperr.ErrNotFound
	}
	scheme, token, ok := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !s.adminToken(strings.TrimSpace(token)) {
		return s.authFailure(c, limitAdminAuth)
	}
	return s.decodeBody(c)
}

// adminToken compares token with every configured one in constant time (of their hashes, so
// that neither length nor position leaks).
func (s *Server) adminToken(token string) bool {
	got := sha256.Sum256([]byte(token))
	match := 0
	for _, t := range s.Operator.AdminTokens {
		want := sha256.Sum256([]byte(t))
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	return match == 1 && token != ""
}

func (s *Server) sendTenant(c *fiber.Ctx, status int, t *models.Tenant) error {
	v, err := s.Operator.Tenants.View(c.UserContext(), t)
	if err != nil {
		return err
	}
	return c.Status(status).JSON(fiber.Map{"data": v})
}

func (s *Server) createTenant(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.Create(c.UserContext(), validate.DecodeObject(c.Body()))
	if err != nil {
		return err
	}
	return s.sendTenant(c, fiber.StatusCreated, t)
}

func (s *Server) listTenants(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	r := pageRequest(c, &errs)
	if err := errs.Err(); err != nil {
		return err
	}
	page, err := s.Operator.Tenants.List(c.UserContext(), r)
	if err != nil {
		return err
	}
	return sendList(c, s.AppURL, r, page)
}

func (s *Server) getTenant(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.GetRef(c.UserContext(), c.Params("tenant"))
	if err != nil {
		return err
	}
	return s.sendTenant(c, fiber.StatusOK, t)
}

func (s *Server) updateTenant(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.GetRef(c.UserContext(), c.Params("tenant"))
	if err != nil {
		return err
	}
	if t, err = s.Operator.Tenants.Update(c.UserContext(), t.ID, validate.DecodeObject(c.Body())); err != nil {
		return err
	}
	return s.sendTenant(c, fiber.StatusOK, t)
}

func (s *Server) rotateSiteKey(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.GetRef(c.UserContext(), c.Params("tenant"))
	if err != nil {
		return err
	}
	if t, err = s.Operator.Tenants.RotateSiteKey(c.UserContext(), t.ID); err != nil {
		return err
	}
	return s.sendTenant(c, fiber.StatusOK, t)
}

// createdToken is the one answer that shows a token's secret.
type createdToken struct {
	ID        string   `json:"id"`
	Token     string   `json:"token"`
	Name      string   `json:"name"`
	Abilities []string `json:"abilities"`
	ExpiresAt *string  `json:"expires_at"`
}

func (s *Server) createToken(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.GetRef(c.UserContext(), c.Params("tenant"))
	if err != nil {
		return err
	}
	in, err := s.Operator.Tokens.Parse(validate.DecodeObject(c.Body()))
	if err != nil {
		return err
	}
	row, plain, err := s.Operator.Tokens.Create(c.UserContext(), t.ID, in)
	if err != nil {
		return err
	}
	v := auth.ViewToken(row)
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"data": createdToken{
		ID: v.ID, Token: plain, Name: v.Name, Abilities: v.Abilities, ExpiresAt: v.ExpiresAt}})
}

func (s *Server) listTokens(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.GetRef(c.UserContext(), c.Params("tenant"))
	if err != nil {
		return err
	}
	rows, err := s.Operator.Tokens.List(c.UserContext(), t.ID)
	if err != nil {
		return err
	}
	out := make([]auth.TokenJSON, len(rows))
	for i := range rows {
		out[i] = auth.ViewToken(&rows[i])
	}
	return c.JSON(fiber.Map{"data": out})
}

func (s *Server) revokeToken(c *fiber.Ctx) error {
	id, ok := models.ParseID(c.Params("token"))
	if !ok {
		return apperr.ErrNotFound
	}
	if err := s.Operator.Tokens.Revoke(c.UserContext(), id); err != nil {
		return err
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// setFeature answers PUT /api/admin/tenants/{tenant}/features/{feature} {"active":bool}; a
// feature that does not exist is 404 before the body is looked at.
func (s *Server) setFeature(c *fiber.Ctx) error {
	t, err := s.Operator.Tenants.GetRef(c.UserContext(), c.Params("tenant"))
	if err != nil {
		return err
	}
	feature := c.Params("feature")
	if !features.IsKnown(feature) {
		return apperr.ErrNotFound
	}
	in := validate.DecodeObject(c.Body())
	var errs apperr.FieldErrors
	active := false
	if in["active"] == nil {
		validate.Required(&errs, "active")
	} else {
		active, _ = validate.Boolean(&errs, "active", in["active"])
	}
	if err := errs.Err(); err != nil {
		return err
	}
	out, err := s.Operator.Tenants.SetFeature(c.UserContext(), t.ID, feature, active)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": out})
}
