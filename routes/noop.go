package routes

import (
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// maxNoopIDs is the most ids POST /bench/noop answers with: a tracking request's limit.
const maxNoopIDs = 100

// noopBodies[n] is the answer of POST /bench/noop?ids=n: a tracking request's 202 body with n
// ids of the real ids' length, encoded once.
var noopBodies = func() [][]byte {
	const id = `"00000000-0000-7000-8000-000000000000"`
	out := make([][]byte, maxNoopIDs+1)
	for n := range out {
		out[n] = []byte(`{"data":{"ids":[` + strings.TrimSuffix(strings.Repeat(id+",", n), ",") + `]}}`)
	}
	return out
}()

// benchNoop answers POST /bench/noop, registered only when the configuration asks for it: a
// 202 of the size a tracking request of ?ids=N events (default 1) gets, behind the same
// middleware and address budget as POST /api/track, without reading the body or doing any of
// the tracking work.
// It is the HTTP floor that make bench measures ingestion against.
func (s *Server) benchNoop(c *fiber.Ctx) error {
	if limited := s.limit(c, budget{limitTrackIP, clientIP(c, s.TrustedProxies), s.Limits.TrackIP}); limited != nil {
		return limited
	}
	n, err := strconv.Atoi(c.Query("ids", "1"))
	if err != nil || n < 0 || n > maxNoopIDs {
		n = 1
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(fiber.StatusAccepted).Send(noopBodies[n])
}
