// Package routes is eventq's HTTP surface: Fiber handlers as methods on Server, which holds
// their dependencies. New registers every route.
package routes

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/cors"
	"github.com/gofiber/fiber/v2/middleware/requestid"

	"github.com/eventq/eventq/docs"
	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/consume"
	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/export"
	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/members"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/internal/payments"
	"github.com/eventq/eventq/internal/products"
	"github.com/eventq/eventq/internal/purchases"
	"github.com/eventq/eventq/internal/ratelimit"
	"github.com/eventq/eventq/internal/redisconn"
	"github.com/eventq/eventq/internal/tenants"
	"github.com/eventq/eventq/internal/tracking"
)

// maxBodyBytes is the largest body any route accepts; routes with a smaller limit check
// their own.
const maxBodyBytes = 1 << 20

// Server holds what the handlers need, as a few services. Every field is required unless its
// comment says it may be nil.
type Server struct {
	// Health answers the readiness probe.
	Health Health
	// Guard authenticates and rate-limits requests.
	Guard Guard
	// Tracking takes tracked events (both track routes).
	Tracking *tracking.Ingestor
	// Queues reads, trims, leases and acknowledges tenants' queues.
	Queues *consume.Service
	// Payments is the checkout and payment flow behind the checkout, return and webhook routes.
	Payments *payments.Service
	// Tenant serves a tenant's own resources to its token.
	Tenant TenantAPI
	// Operator serves the operator API.
	Operator OperatorAPI
	Log      *slog.Logger
	// AppURL is the public base URL, without a trailing slash (APP_URL): every link in an
	// answer starts with it.
	AppURL string
	// Metrics counts requests and outcomes and serves /metrics.
	Metrics *metrics.Metrics
	// BenchNoop registers POST /bench/noop and GET /bench/page, for make bench only, in an api
	// built with -tags bench (BenchBuild).
	BenchNoop bool
}

// Health is what the readiness probe asks.
type Health struct {
	// PingDB reports whether the database answers.
	PingDB func(ctx context.Context) error
	Redis  redisconn.Set
}

// Guard is what stands in front of every handler: tokens, rate limits, the client's address.
type Guard struct {
	Auth *auth.Authenticator
	// Limiter enforces Limits; nil lets everything through.
	Limiter *ratelimit.Limiter
	// Limits are the rate limits of the tracking and platform routes.
	Limits         config.Limits
	TrustedProxies []netip.Prefix
}

// TenantAPI serves a tenant's members, products, entitlements, purchases, erasures and access
// export to its token.
type TenantAPI struct {
	Members   *members.Service
	Products  *products.Service
	Purchases *purchases.Service
	Erasures  *erasure.Service
	Export    *export.Exporter
}

// OperatorAPI serves tenants and tokens to the operator.
type OperatorAPI struct {
	Tenants *tenants.Service
	Tokens  *auth.Tokens
	// AdminTokens are the operator API's tokens (ADMIN_API_TOKENS); empty: no operator API.
	AdminTokens []string
}

// New returns the Fiber app with every route registered.
func New(s *Server) *fiber.App {
	if s.Metrics == nil {
		s.Metrics = metrics.New()
	}
	app := fiber.New(fiber.Config{
		AppName:               "eventq",
		DisableStartupMessage: true,
		BodyLimit:             maxBodyBytes,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		ErrorHandler:          s.handleError,
		JSONEncoder:           httpx.JSONMarshal,
		// Bodies are read as sent, whatever their content type: a multipart body the
		// webhook cannot use must still get its 200, not fasthttp's 400.
		DisablePreParseMultipartForm: true,
	})

	app.Use(requestid.New(), s.observe)
	app.Get("/healthz", s.healthz)
	app.Get("/readyz", s.readyz)

	public := cors.New(cors.Config{AllowOrigins: "*", AllowMethods: "POST,OPTIONS", MaxAge: 86400})
	app.Options("/api/track", public)
	app.Post("/api/track", public, s.trackAddressFirst, s.decodeBody, s.trackPublic)
	s.benchRoutes(app, public)
	app.Get("/tracker.js", s.trackerJS)
	app.Get("/openapi.yaml", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, "application/yaml")
		c.Set(fiber.HeaderAccessControlAllowOrigin, "*") // for API tools running in a browser
		return c.Send(docs.OpenAPI)
	})

	app.Get("/api/platform/events", s.token(auth.AbilityEventsRead), s.readEvents)
	app.Delete("/api/platform/events", s.token(auth.AbilityEventsDelete), s.trimEvents)
	app.Post("/api/platform/events/leases", s.token(auth.AbilityEventsRead, auth.AbilityEventsDelete), s.leaseEvents)
	app.Post("/api/platform/events/acks", s.token(auth.AbilityEventsDelete), s.ackEvents)
	app.Get("/api/platform/events/dead-letters", s.token(auth.AbilityEventsRead), s.readDeadLetters)
	app.Delete("/api/platform/events/dead-letters", s.token(auth.AbilityEventsDelete), s.dropDeadLetters)
	app.Post("/api/platform/track", s.token(auth.AbilityEventsWrite), s.trackPlatform)
	app.Post("/api/platform/checkout/sessions", s.token(auth.AbilityCheckoutWrite), s.createCheckout)
	s.frontDoor(app)

	app.Post("/api/webhooks/psp", s.webhookBody, s.webhook)
	app.Post("/api/webhooks/stripe", s.webhookBody, s.webhook)
	app.Get("/checkout/return", s.checkoutReturn)
	// No catch-all: Fiber's own 404 and 405 (with Allow) reach handleError.
	return app
}
