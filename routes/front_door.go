package routes

import (
	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/auth"
)

// frontDoor registers the routes of members, products, entitlements and purchases (for a
// tenant's token) and the operator API (for ADMIN_API_TOKENS).
func (s *Server) frontDoor(app *fiber.App) {
	read, write := s.token(auth.AbilityMembersRead), s.token(auth.AbilityMembersWrite)
	app.Post("/api/platform/members", write, s.createMember)
	app.Get("/api/platform/members", read, s.listMembers)
	app.Get("/api/platform/members/:member", read, s.getMember)
	app.Patch("/api/platform/members/:member", write, s.updateMember)
	app.Delete("/api/platform/members/:member", write, s.eraseMember)
	app.Get("/api/platform/erasures/:erasure", read, s.getErasure)
	app.Get("/api/platform/members/:member/entitlements", read, s.memberEntitlements)
	app.Get("/api/platform/members/:member/entitlements/:product", read, s.checkEntitlement)
	app.Get("/api/platform/members/:member/purchases", read, s.memberPurchases)
	// The access export holds the member's events (URLs, addresses, agents): events:read too.
	app.Get("/api/platform/members/:member/data", s.token(auth.AbilityMembersRead, auth.AbilityEventsRead), s.memberData)

	read, write = s.token(auth.AbilityProductsRead), s.token(auth.AbilityProductsWrite)
	app.Post("/api/platform/products", write, s.createProduct)
	app.Get("/api/platform/products", read, s.listProducts)
	app.Get("/api/platform/products/:product", read, s.getProduct)
	app.Patch("/api/platform/products/:product", write, s.updateProduct)

	admin := app.Group("/api/admin", s.admin)
	admin.Post("/tenants", s.createTenant)
	admin.Get("/tenants", s.listTenants)
	admin.Get("/tenants/:tenant", s.getTenant)
	admin.Patch("/tenants/:tenant", s.updateTenant)
	admin.Post("/tenants/:tenant/site-key", s.rotateSiteKey)
	admin.Post("/tenants/:tenant/tokens", s.createToken)
	admin.Get("/tenants/:tenant/tokens", s.listTokens)
	admin.Delete("/tokens/:token", s.revokeToken)
	admin.Put("/tenants/:tenant/features/:feature", s.setFeature)
}
