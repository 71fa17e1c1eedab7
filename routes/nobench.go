//go:build !bench

package routes

import "github.com/gofiber/fiber/v2"

// BenchBuild is false: the bench's routes are compiled only into an api built with -tags bench
// (make bench does), so that no production api carries them.
const BenchBuild = false

// benchRoutes registers nothing.
func (s *Server) benchRoutes(*fiber.App, fiber.Handler) {}
