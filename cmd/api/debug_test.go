package main

import (
	"testing"

	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/routes"
)

// TestDebugSwitches checks that the bench's routes exist only in an api built for the bench,
// and that the api's own address never serves profiles.
func TestDebugSwitches(t *testing.T) {
	testenv.OnOneDatabase(t)
	body := []byte(`{"site_key":"k","events":[{"type":"page_view","session_id":"s","url":"https://a.example/","event_sequence":1}]}`)

	t.Run("serves neither by default", func(t *testing.T) {
		e := startAPI(t)
		assertBody(t, e.Do(t, "POST", "/bench/noop", "", body), 404, `{"message":"Not Found."}`)
		assertBody(t, e.Do(t, "GET", "/bench/page?bytes=10", "", nil), 404, `{"message":"Not Found."}`)
		assertBody(t, e.Do(t, "GET", "/debug/pprof/cmdline", "", nil), 404, `{"message":"Not Found."}`)
	})

	t.Run("serves no bench route when on, unless built with -tags bench", func(t *testing.T) {
		if routes.BenchBuild {
			t.Skip("built with -tags bench: TestBenchRoutes checks them")
		}
		e := startAPI(t, "BENCH_NOOP_ROUTE=on")
		assertBody(t, e.Do(t, "POST", "/bench/noop", "", body), 404, `{"message":"Not Found."}`)
		assertBody(t, e.Do(t, "GET", "/bench/page?bytes=10", "", nil), 404, `{"message":"Not Found."}`)
	})

}
