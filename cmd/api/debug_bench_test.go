//go:build bench

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/testenv"
)

// TestBenchRoutes checks the bench's routes of an api built with -tags bench, on when
// BENCH_NOOP_ROUTE asks for them (make bench-check runs it).
func TestBenchRoutes(t *testing.T) {
	testenv.OnOneDatabase(t)
	noop := func(ids int) string {
		id := `"00000000-0000-7000-8000-000000000000"`
		return `{"data":{"ids":[` + strings.TrimSuffix(strings.Repeat(id+",", ids), ",") + `]}}`
	}
	body := []byte(`{"site_key":"k","events":[{"type":"page_view","session_id":"s","url":"https://a.example/","event_sequence":1}]}`)

	t.Run("serves none when off", func(t *testing.T) {
		e := startAPI(t)
		assertBody(t, e.Do(t, "POST", "/bench/noop", "", body), 404, `{"message":"Not Found."}`)
	})

	t.Run("answers the no-op route like a tracking request when on", func(t *testing.T) {
		e := startAPI(t, "BENCH_NOOP_ROUTE=on")
		for path, want := range map[string]string{
			"/bench/noop":         noop(1),
			"/bench/noop?ids=50":  noop(50),
			"/bench/noop?ids=100": noop(100),
			"/bench/noop?ids=101": noop(1),
			"/bench/noop?ids=x":   noop(1),
		} {
			res := e.Do(t, "POST", path, "", body, "Content-Type", "application/json")
			assertBody(t, res, 202, want)
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s: Content-Type %q, want application/json", path, ct)
			}
		}
		if res := e.Do(t, "POST", "/bench/noop", "", body, "Origin", "https://shop.example"); res.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("no CORS header: the route must run POST /api/track's middleware; headers %v", res.Header)
		}
	})

	t.Run("answers a page of the asked size when on", func(t *testing.T) {
		e := startAPI(t, "BENCH_NOOP_ROUTE=on")
		for _, n := range []int{0, 1, 3810035, 5} {
			res := e.Do(t, "GET", fmt.Sprintf("/bench/page?bytes=%d", n), "", nil)
			assertBody(t, res, 200, strings.Repeat("x", n))
		}
		for _, q := range []string{"", "?bytes=x", "?bytes=-1", "?bytes=67108865"} {
			assertBody(t, e.Do(t, "GET", "/bench/page"+q, "", nil), 400, `{"message":"Bad Request."}`)
		}
	})

}
