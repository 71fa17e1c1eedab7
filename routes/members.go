package routes

import (
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/members"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/purchases"
	"github.com/eventq/eventq/internal/validate"
	"github.com/eventq/eventq/models"
)

// The routes of a tenant's members, their entitlements and purchases (members.Service,
// purchases.Service), for the tenant's token.

func (s *Server) createMember(c *fiber.Ctx) error {
	m, err := s.Tenant.Members.Create(c.UserContext(), principal(c).TenantID, validate.DecodeObject(c.Body()))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"data": members.View(m)})
}

func (s *Server) listMembers(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	r := pageRequest(c, &errs)
	if err := errs.Err(); err != nil {
		return err
	}
	f := members.Filter{ExternalID: strings.TrimSpace(query(c, "external_id")), Email: strings.TrimSpace(query(c, "email"))}
	page, err := s.Tenant.Members.List(c.UserContext(), principal(c).TenantID, f, r)
	if err != nil {
		return err
	}
	return sendList(c, s.AppURL, r, paginate.Map(page, members.View))
}

// memberRef is the {member} of a path: an id or "external:" and an external id, as sent
// (percent-encoded; members.Service.Get decodes it). A copy: Fiber's value is the request's
// buffer, reused by the next request, and the reference becomes a cache key.
func memberRef(c *fiber.Ctx) string { return utils.CopyString(c.Params("member")) }

func (s *Server) getMember(c *fiber.Ctx) error {
	m, err := s.Tenant.Members.Get(c.UserContext(), principal(c).TenantID, memberRef(c))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": members.View(m)})
}

func (s *Server) updateMember(c *fiber.Ctx) error {
	m, err := s.Tenant.Members.Update(c.UserContext(), principal(c).TenantID, memberRef(c), validate.DecodeObject(c.Body()))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": members.View(m)})
}

// eraseMember answers DELETE /api/platform/members/{member}: 202 with the erasure, which the
// worker carries out (erasure.Service); the member answers 404 from now on.
func (s *Server) eraseMember(c *fiber.Ctx) error {
	m, err := s.Tenant.Members.Get(c.UserContext(), principal(c).TenantID, memberRef(c))
	if err != nil {
		return err
	}
	e, err := s.Tenant.Erasures.Request(c.UserContext(), m)
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"data": erasure.View(e)})
}

// getErasure answers GET /api/platform/erasures/{erasure}.
func (s *Server) getErasure(c *fiber.Ctx) error {
	id, ok := models.ParseID(c.Params("erasure"))
	if !ok {
		return apperr.ErrNotFound
	}
	e, err := s.Tenant.Erasures.Get(c.UserContext(), principal(c).TenantID, id)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": erasure.View(e)})
}

func (s *Server) memberEntitlements(c *fiber.Ctx) error {
	tenantID := principal(c).TenantID
	id, err := s.Tenant.Members.Resolve(c.UserContext(), tenantID, memberRef(c))
	if err != nil {
		return err
	}
	rows, err := s.Tenant.Purchases.InForce(c.UserContext(), tenantID, id)
	if err != nil {
		return err
	}
	out := make([]purchases.EntitlementJSON, len(rows))
	for i := range rows {
		out[i] = purchases.ViewEntitlement(&rows[i])
	}
	return c.JSON(fiber.Map{"data": out})
}

// checkEntitlement answers the paywall's question, "may this member open this product?", on
// every page view: both lookups come from caches at most half a second old.
func (s *Server) checkEntitlement(c *fiber.Ctx) error {
	tenantID := principal(c).TenantID
	member, err := s.Tenant.Members.Resolve(c.UserContext(), tenantID, memberRef(c))
	if err != nil {
		return err
	}
	product, ok := models.ParseID(c.Params("product"))
	if !ok {
		return apperr.ErrNotFound
	}
	e, err := s.Tenant.Purchases.Check(c.UserContext(), tenantID, member, product)
	if err != nil {
		return err
	}
	if e == nil {
		return apperr.ErrNotFound
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(entitlementBody(e))
}

// entitlementBody is {"data":entitlement}, the bytes the JSON encoder would write, built
// without it on the hot path: ids are digits and the time needs no escape.
func entitlementBody(e *models.Entitlement) []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"data":{"id":"`...)
	b = strconv.AppendUint(b, e.ID, 10)
	b = append(b, `","product_id":"`...)
	b = strconv.AppendUint(b, e.ProductID, 10)
	b = append(b, `","purchase_id":"`...)
	b = strconv.AppendUint(b, e.PurchaseID, 10)
	b = append(b, `","granted_at":"`...)
	b = e.CreatedAt.UTC().AppendFormat(b, models.TimeFormat)
	return append(b, `"}}`...)
}

func (s *Server) memberPurchases(c *fiber.Ctx) error {
	tenantID := principal(c).TenantID
	m, err := s.Tenant.Members.Get(c.UserContext(), tenantID, memberRef(c))
	if err != nil {
		return err
	}
	rows, err := s.Tenant.Purchases.Purchases(c.UserContext(), tenantID, m.ID)
	if err != nil {
		return err
	}
	out := make([]purchases.PurchaseJSON, len(rows))
	for i := range rows {
		out[i] = purchases.ViewPurchase(&rows[i])
	}
	return c.JSON(fiber.Map{"data": out})
}
