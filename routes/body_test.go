package routes

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// encode returns plain in coding, as a client would send it.
func encode(t testing.TB, coding string, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case "deflate":
		w, _ = zlib.NewWriterLevel(&buf, zlib.BestCompression)
	case "raw-deflate":
		w, _ = flate.NewWriter(&buf, flate.BestCompression)
	case "br":
		w = brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 5, LGWin: 24})
	case "zstd":
		w, _ = zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	default:
		t.Fatalf("no encoder for %q", coding)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var codingsDecoded = []struct{ name, header string }{
	{"gzip", "gzip"}, {"deflate", "deflate"}, {"raw-deflate", "deflate"}, {"br", "br"}, {"zstd", "zstd"},
}

func TestDecodeReadsEveryCodingWithinTheLimit(t *testing.T) {
	plain := []byte(strings.Repeat(`{"site_key":"k","events":[]}`, 100))
	for _, c := range codingsDecoded {
		t.Run(c.name+" decodes to the plain body", func(t *testing.T) {
			got, err := decode(encode(t, c.name, plain), c.header, len(plain), new(bytes.Buffer))
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("%v, %d bytes", err, len(got))
			}
		})
		t.Run(c.name+" one byte over the limit is 413", func(t *testing.T) {
			if _, err := decode(encode(t, c.name, plain), c.header, len(plain)-1, new(bytes.Buffer)); !errors.Is(err, errTooLarge) {
				t.Fatalf("err %v", err)
			}
		})
		t.Run(c.name+" that is not valid is 400", func(t *testing.T) {
			bad := encode(t, c.name, plain)
			bad = bad[:len(bad)/2]
			if _, err := decode(bad, c.header, len(plain), new(bytes.Buffer)); !errors.Is(err, errBadEncoding) {
				t.Fatalf("err %v", err)
			}
		})
	}
	t.Run("codings applied in turn are undone last first", func(t *testing.T) {
		body := encode(t, "br", encode(t, "gzip", plain))
		got, err := decode(body, "gzip, br", len(plain), new(bytes.Buffer))
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%v, %d bytes", err, len(got))
		}
	})
	t.Run("identity is no coding", func(t *testing.T) {
		if got, err := decode(plain, "identity", len(plain), new(bytes.Buffer)); err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%v", err)
		}
		if _, err := decode(plain, "identity", len(plain)-1, new(bytes.Buffer)); !errors.Is(err, errTooLarge) {
			t.Fatalf("%v", err)
		}
	})
	for _, h := range []string{"compress", "x-custom", "gzip, snappy", "aes128gcm"} {
		t.Run(h+" is an unknown coding", func(t *testing.T) {
			if _, err := decode(plain, h, len(plain), new(bytes.Buffer)); !errors.Is(err, errUnsupportedEncoding) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// A body that decodes to 50 MiB costs the process about its route's limit, not what it would
// decode to: Fiber's Ctx.Body decodes it whole (about 50 MiB allocated for each).
func TestDecodeBombsCostTheLimitNotTheirSize(t *testing.T) {
	app := New(&Server{})
	for _, c := range codingsDecoded {
		body := bomb(t, c.name)
		t.Run(fmt.Sprintf("%s (%d KiB sent)", c.name, len(body)>>10), func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := 0; i < 3; i++ {
				req := httptest.NewRequest("POST", "/api/track", bytes.NewReader(body))
				req.Header.Set("Content-Encoding", c.header)
				res, err := app.Test(req, -1)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(res.Body)
				if res.StatusCode != 413 || string(got) != `{"message":"Content Too Large."}` {
					t.Fatalf("%d %s", res.StatusCode, got)
				}
			}
			runtime.ReadMemStats(&after)
			// Per request: the body as sent (twice, by the test client and the server), the
			// 64 KiB limit and the decoder's window (brotli's up to 16 MiB, zstd's 8 MiB).
			allowed := uint64(3 * (2*len(body) + 24<<20))
			if grew := after.TotalAlloc - before.TotalAlloc; grew > allowed {
				t.Fatalf("3 requests allocated %d MiB, allowed %d MiB", grew>>20, allowed>>20)
			}
		})
	}
}

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
		app := New(&Server{BenchNoop: true})
		body := encode(t, "gzip", make([]byte, 1<<20+1))
		req := httptest.NewRequest("POST", "/bench/noop", bytes.NewReader(body))
		req.Header.Set("Content-Encoding", "gzip")
		res, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		if res.StatusCode != 413 || string(got) != `{"message":"Content Too Large."}` {
			t.Fatalf("%d %s", res.StatusCode, got)
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
