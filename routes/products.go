package routes

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/products"
	"github.com/eventq/eventq/internal/validate"
)

// The routes of a tenant's products (products.Service), for the tenant's token.

func (s *Server) createProduct(c *fiber.Ctx) error {
	p, err := s.Tenant.Products.Create(c.UserContext(), principal(c).TenantID, validate.DecodeObject(c.Body()))
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"data": products.View(p)})
}

func (s *Server) listProducts(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	r := pageRequest(c, &errs)
	var active *bool
	if raw := strings.TrimSpace(query(c, "active")); raw != "" {
		if b, ok := validate.Boolean(&errs, "active", raw); ok {
			active = &b
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	page, err := s.Tenant.Products.List(c.UserContext(), principal(c).TenantID, active, r)
	if err != nil {
		return err
	}
	return sendList(c, s.AppURL, r, paginate.Map(page, products.View))
}

func (s *Server) getProduct(c *fiber.Ctx) error {
	p, err := s.Tenant.Products.Get(c.UserContext(), principal(c).TenantID, c.Params("product"))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": products.View(p)})
}

func (s *Server) updateProduct(c *fiber.Ctx) error {
	p, err := s.Tenant.Products.Update(c.UserContext(), principal(c).TenantID, c.Params("product"), validate.DecodeObject(c.Body()))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": products.View(p)})
}
