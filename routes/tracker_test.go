package routes

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/jsmin"
)

func trackerApp() *fiber.App {
	app := fiber.New()
	app.Get("/tracker.js", (&Server{}).trackerJS)
	return app
}

func TestTrackerJS(t *testing.T) {
	app := trackerApp()
	get := func(t *testing.T, ifNoneMatch string, extra ...string) (int, string, map[string]string) {
		t.Helper()
		path := "/tracker.js"
		if len(extra) > 1 {
			path = extra[1]
		}
		req := httptest.NewRequest("GET", path, nil)
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		if len(extra) > 0 && extra[0] != "" {
			req.Header.Set("Accept-Encoding", extra[0])
		}
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		h := map[string]string{}
		for _, k := range []string{"Content-Type", "Cache-Control", "ETag", "Access-Control-Allow-Origin", "Content-Encoding", "Vary"} {
			h[k] = res.Header.Get(k)
		}
		return res.StatusCode, string(body), h
	}

	t.Run("serves the embedded script with caching headers", func(t *testing.T) {
		status, body, h := get(t, "")
		want := map[string]string{
			"Content-Type":                "application/javascript; charset=utf-8",
			"Cache-Control":               "public, max-age=300",
			"ETag":                        tracker.etag,
			"Access-Control-Allow-Origin": "*",
		}
		if status != 200 || body != string(tracker.plain) {
			t.Fatalf("got %d, %d bytes; want 200 and the embedded %d bytes", status, len(body), len(tracker.plain))
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("%s = %q, want %q", k, h[k], v)
			}
		}
		if !strings.Contains(body, "window.eventq") || !strings.HasPrefix(tracker.etag, `"`) {
			t.Fatalf("unexpected script or etag %s", tracker.etag)
		}
	})

	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"answers 304 to its own etag", tracker.etag, 304},
		{"answers 304 to a weak form of its etag", "W/" + tracker.etag, 304},
		{"answers 304 when the etag is in a list", `"old", ` + tracker.etag, 304},
		{"answers 304 to a star", "*", 304},
		{"answers 200 to a stale etag", `"0123"`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, h := get(t, tc.header)
			if status != tc.status || h["ETag"] != tracker.etag {
				t.Fatalf("got %d etag %s, want %d", status, h["ETag"], tc.status)
			}
			if status == 304 && body != "" {
				t.Fatalf("304 with a body: %q", body)
			}
		})
	}
}

// trackerGzipBudget is the most bytes the served script may take gzip-compressed, the coding
// every browser accepts (docs/tracking.md gives the current figures).
const trackerGzipBudget = 1500

// The served script is the minified source: regenerate it with go generate ./routes.
func TestTrackerIsTheMinifiedSource(t *testing.T) {
	src, err := static.ReadFile("static/tracker.js")
	if err != nil {
		t.Fatal(err)
	}
	want, err := jsmin.Minify(src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, tracker.plain) {
		t.Fatal("static/tracker.min.js is not the minified static/tracker.js: run go generate ./routes")
	}
	t.Logf("tracker: source %d B, minified %d B, gzip %d B, br %d B", len(src), len(tracker.plain), len(tracker.gzipped), len(tracker.brotlied))
}

func TestTrackerFitsItsBudget(t *testing.T) {
	if n := len(tracker.gzipped); n > trackerGzipBudget {
		t.Fatalf("tracker.js is %d B gzip-compressed, over its budget of %d B: trim routes/static/tracker.js", n, trackerGzipBudget)
	}
	if len(tracker.brotlied) >= len(tracker.gzipped) {
		t.Fatalf("brotli (%d B) is not smaller than gzip (%d B)", len(tracker.brotlied), len(tracker.gzipped))
	}
}

func TestTrackerJSGzipAndVersionedURL(t *testing.T) {
	app := trackerApp()
	do := func(t *testing.T, path, acceptEncoding, ifNoneMatch string) (*http.Response, []byte) {
		t.Helper()
		req := httptest.NewRequest("GET", path, nil)
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	res, body := do(t, "/tracker.js", "gzip, deflate", "")
	if res.Header.Get("Content-Encoding") != "gzip" || res.Header.Get("Vary") != "Accept-Encoding" || res.Header.Get("ETag") != tracker.gzipETag {
		t.Fatalf("gzip: Content-Encoding %q, Vary %q, ETag %q", res.Header.Get("Content-Encoding"), res.Header.Get("Vary"), res.Header.Get("ETag"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !bytes.Equal(plain, tracker.plain) {
		t.Fatal("the gzip body does not decode to the script")
	}
	if res, _ := do(t, "/tracker.js", "gzip", tracker.gzipETag); res.StatusCode != 304 {
		t.Fatalf("revalidating the gzip variant: %d", res.StatusCode)
	}
	if res, _ := do(t, "/tracker.js", "gzip;q=0", ""); res.Header.Get("Content-Encoding") != "" {
		t.Fatal("gzip;q=0 answered gzip")
	}

	t.Run("prefers brotli when accepted", func(t *testing.T) {
		res, body := do(t, "/tracker.js", "gzip, deflate, br, zstd", "")
		if res.Header.Get("Content-Encoding") != "br" || res.Header.Get("Vary") != "Accept-Encoding" || res.Header.Get("ETag") != tracker.brETag {
			t.Fatalf("br: Content-Encoding %q, Vary %q, ETag %q", res.Header.Get("Content-Encoding"), res.Header.Get("Vary"), res.Header.Get("ETag"))
		}
		plain, err := io.ReadAll(brotli.NewReader(bytes.NewReader(body)))
		if err != nil || !bytes.Equal(plain, tracker.plain) {
			t.Fatalf("the br body does not decode to the script (err %v)", err)
		}
		if res, _ := do(t, "/tracker.js", "br", tracker.brETag); res.StatusCode != 304 {
			t.Fatalf("revalidating the br variant: %d", res.StatusCode)
		}
		if res, _ := do(t, "/tracker.js", "br", tracker.gzipETag); res.StatusCode != 200 {
			t.Fatalf("the gzip variant's etag revalidated the br variant: %d", res.StatusCode)
		}
		if res, _ := do(t, "/tracker.js", "br;q=0, gzip", ""); res.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("br;q=0, gzip answered %q", res.Header.Get("Content-Encoding"))
		}
	})
	if res, _ := do(t, "/tracker.js?v="+TrackerVersion(), "", ""); res.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
		t.Fatalf("versioned URL: Cache-Control %q", res.Header.Get("Cache-Control"))
	}
	if res, _ := do(t, "/tracker.js?v=0ld", "", ""); res.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Fatalf("an old version: Cache-Control %q", res.Header.Get("Cache-Control"))
	}
}
