package routes

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
)

func trackerApp() *fiber.App {
	app := fiber.New()
	app.Get("/tracker.js", (&Server{}).trackerJS)
	return app
}

func TestTrackerJS(t *testing.T) {
	app := trackerApp()
	get := func(t *testing.T, ifNoneMatch string) (int, string, map[string]string) {
		t.Helper()
		req := httptest.NewRequest("GET", "/tracker.js", nil)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		h := map[string]string{}
		for _, k := range []string{"Content-Type", "Cache-Control", "ETag", "Access-Control-Allow-Origin"} {
			h[k] = res.Header.Get(k)
		}
		return res.StatusCode, string(body), h
	}

	t.Run("serves the embedded script with caching headers", func(t *testing.T) {
		status, body, h := get(t, "")
		want := map[string]string{
			"Content-Type":                "application/javascript; charset=utf-8",
			"Cache-Control":               "public, max-age=300",
			"ETag":                        trackerETag,
			"Access-Control-Allow-Origin": "*",
		}
		if status != 200 || body != string(trackerSource) {
			t.Fatalf("got %d, %d bytes; want 200 and the embedded %d bytes", status, len(body), len(trackerSource))
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("%s = %q, want %q", k, h[k], v)
			}
		}
		if !strings.Contains(body, "window.eventq") || !strings.HasPrefix(trackerETag, `"`) {
			t.Fatalf("unexpected script or etag %s", trackerETag)
		}
	})

	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"answers 304 to its own etag", trackerETag, 304},
		{"answers 304 to a weak form of its etag", "W/" + trackerETag, 304},
		{"answers 304 when the etag is in a list", `"old", ` + trackerETag, 304},
		{"answers 304 to a star", "*", 304},
		{"answers 200 to a stale etag", `"0123"`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, h := get(t, tc.header)
			if status != tc.status || h["ETag"] != trackerETag {
				t.Fatalf("got %d etag %s, want %d", status, h["ETag"], tc.status)
			}
			if status == 304 && body != "" {
				t.Fatalf("304 with a body: %q", body)
			}
		})
	}
}
