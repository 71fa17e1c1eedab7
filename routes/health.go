package routes

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
)

// healthz answers 200 while the process serves requests.
func (s *Server) healthz(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "ok"})
}

// readyz answers 200 when the database and every Redis connection answer within two seconds,
// else 503.
func (s *Server) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	checks := fiber.Map{"database": "ok", "redis": "ok"}
	ready := true
	if s.Health.PingDB(ctx) != nil {
		checks["database"], ready = "unreachable", false
	}
	if err := s.Health.Redis.Ping(ctx); err != nil {
		s.Log.Warn("readyz: redis unreachable", "err", err)
		checks["redis"], ready = "unreachable", false
	}
	if !ready {
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"message": "Server Error.", "checks": checks})
	}
	return c.JSON(fiber.Map{"status": "ok", "checks": checks})
}
