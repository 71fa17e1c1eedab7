package routes

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// encode returns plain in gzip, as a client would send it.
func encode(t testing.TB, coding string, plain []byte) []byte {
	t.Helper()
	if coding != "gzip" {
		t.Fatalf("no encoder for %q", coding)
	}
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every route decodes its body after routing, its limits and its authentication, and answers a
// coding it cannot take with the contract's status and body.
func TestDecodeAnswersOnEveryRoute(t *testing.T) {
	app := New(&Server{})
	do := func(t *testing.T, method, path, coding string, body []byte) (int, string) {
		t.Helper()
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Encoding", coding)
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(got)
	}
	t.Run("an unknown coding is 415", func(t *testing.T) {
		if status, body := do(t, "POST", "/api/track", "compress", []byte("x")); status != 415 || body != `{"message":"Unsupported Media Type."}` {
			t.Fatalf("%d %s", status, body)
		}
	})
	t.Run("more than two codings are 415", func(t *testing.T) {
		twice := encode(t, "gzip", encode(t, "gzip", []byte(`{"events":[]}`)))
		if status, got := do(t, "POST", "/api/track", "gzip, gzip", twice); status != 422 {
			t.Fatalf("two codings: %d %s", status, got)
		}
		for _, header := range []string{"gzip, gzip, gzip", "identity, gzip, gzip", strings.Repeat("gzip,", 600) + "gzip"} {
			if status, got := do(t, "POST", "/api/track", header, twice); status != 415 || got != `{"message":"Unsupported Media Type."}` {
				t.Fatalf("%.40s: %d %s", header, status, got)
			}
		}
	})
	t.Run("a request no route serves, or that authentication refuses, is not decoded", func(t *testing.T) {
		for path, want := range map[string]string{
			"/nowhere":                  `{"message":"Not Found."}`,
			"/api/platform/track":       `{"message":"Unauthenticated."}`,
			"/api/platform/events/acks": `{"message":"Unauthenticated."}`,
		} {
			for _, coding := range []string{"gzip", "compress", strings.Repeat("gzip,", 600)} {
				if status, body := do(t, "POST", path, coding, []byte("not gzip")); body != want {
					t.Fatalf("%s (%.20s): %d %s", path, coding, status, body)
				}
			}
		}
	})
	t.Run("a body over 1 MiB decoded is 413 on other routes", func(t *testing.T) {
		// The decoding's limit is httpx's to keep (its tests); each route's is bodyLimit's.
		for path, want := range map[string]int{"/api/track": 64 << 10, "/api/platform/track": 64 << 10,
			"/api/platform/events/acks": 1 << 20, "/api/webhooks/psp": 1 << 20} {
			if got := bodyLimit(path); got != want {
				t.Errorf("bodyLimit(%s) = %d, want %d", path, got, want)
			}
		}
	})
	t.Run("a body not valid in its coding is 400", func(t *testing.T) {
		if status, got := do(t, "POST", "/api/track", "gzip", []byte("not gzip")); status != 400 || got != `{"message":"Bad Request."}` {
			t.Fatalf("%d %s", status, got)
		}
	})
	t.Run("a decoded tracking body reaches the handler", func(t *testing.T) {
		// No site key: the parser's own 422, which it gives only when it read the JSON.
		status, got := do(t, "POST", "/api/track", "gzip", encode(t, "gzip", []byte(`{"events":[]}`)))
		if status != 422 || !strings.Contains(got, "site_key") {
			t.Fatalf("%d %s", status, got)
		}
	})
}

// The body limit is the matched route's: Fiber matches a path whatever its case and with a
// trailing slash, and such a request gets the limit of the route it reaches.
func TestDecodeLimitIsTheMatchedRoutes(t *testing.T) {
	s := &Server{}
	app := fiber.New(fiber.Config{ErrorHandler: s.handleError})
	read := func(c *fiber.Ctx) error { return c.SendString("read") }
	app.Post("/api/track", s.decodeBody, read)
	app.Post("/api/platform/events/acks", s.decodeBody, read)
	body := encode(t, "gzip", bytes.Repeat([]byte("x"), 100<<10)) // 100 KiB decoded
	for path, want := range map[string]int{
		"/api/track": 413, "/API/TRACK": 413, "/api/track/": 413, "/Api/Track/": 413,
		"/api/platform/events/acks": 200, "/API/PLATFORM/EVENTS/ACKS/": 200,
	} {
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Encoding", "gzip")
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(res.Body); res.StatusCode != want {
			t.Errorf("%s: %d %s, want %d", path, res.StatusCode, got, want)
		}
	}
}
