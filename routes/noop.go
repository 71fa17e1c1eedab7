//go:build bench

package routes

import (
	"bytes"
	"strconv"
	"strings"
	"sync"

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
	if limited := s.limit(c, budget{name: limitTrackIP, key: s.clientBudgetKey(c), rate: s.Guard.Limits.TrackIP}); limited != nil {
		return limited
	}
	n, err := strconv.Atoi(c.Query("ids", "1"))
	if err != nil || n < 0 || n > maxNoopIDs {
		n = 1
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(fiber.StatusAccepted).Send(noopBodies[n])
}

// maxBenchPage is the largest body GET /bench/page answers: a full page of large events.
const maxBenchPage = 64 << 20

// benchPageBody holds the last body GET /bench/page made, for the next request of that size.
var benchPageBody struct {
	sync.Mutex
	b []byte
}

// benchPage answers GET /bench/page?bytes=N, registered only with the bench routes: N bytes of
// JSON-looking filler, made once per size and sent from memory with no other work. It is the
// floor of a queue read's second leg, the bytes' copy to the HTTP client, that make bench
// measures identity reads against beside Redis's own.
func (s *Server) benchPage(c *fiber.Ctx) error {
	n, err := strconv.Atoi(c.Query("bytes"))
	if err != nil || n < 0 || n > maxBenchPage {
		return fiber.ErrBadRequest
	}
	benchPageBody.Lock()
	if len(benchPageBody.b) != n {
		benchPageBody.b = bytes.Repeat([]byte{'x'}, n)
	}
	body := benchPageBody.b
	benchPageBody.Unlock()
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Response().SetBodyRaw(body)
	return nil
}

// BenchBuild is true in an api built with -tags bench, which can serve the bench's routes.
const BenchBuild = true

// benchRoutes registers POST /bench/noop and GET /bench/page when the configuration asks for
// them (BENCH_NOOP_ROUTE), behind the public tracking route's own middleware.
func (s *Server) benchRoutes(app *fiber.App, public fiber.Handler) {
	if s.BenchNoop {
		app.Post("/bench/noop", public, s.decodeBody, s.benchNoop)
		app.Get("/bench/page", s.benchPage)
	}
}
