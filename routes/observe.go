package routes

import (
	"log/slog"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
)

// observe renders errors here (so the status is final) and records each request's route,
// status and latency. Unmatched paths share one label so scanners cannot inflate cardinality.
func (s *Server) observe(c *fiber.Ctx) error {
	start := time.Now()
	if err := c.Next(); err != nil {
		if err := s.handleError(c, err); err != nil {
			return err
		}
	}
	if s.Metrics == nil {
		return nil
	}
	route := c.Route().Path
	if route == "/" { // no route matched: only the middleware ran (the app serves no "/")
		route = "unmatched"
	}
	method := utils.CopyString(c.Method()) // Fiber reuses the buffer; the label outlives the request
	s.Metrics.HTTPRequests.WithLabelValues(route, method, strconv.Itoa(c.Response().StatusCode())).Inc()
	s.Metrics.HTTPDuration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	return nil
}

// log is the server's logger with the request's id.
func (s *Server) log(c *fiber.Ctx) *slog.Logger {
	if id, ok := c.Locals("requestid").(string); ok {
		return s.Log.With("request_id", id)
	}
	return s.Log
}
