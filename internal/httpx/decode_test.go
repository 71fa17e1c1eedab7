package httpx

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
	"github.com/gofiber/fiber/v2"
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
			if _, err := decode(encode(t, c.name, plain), c.header, len(plain)-1, new(bytes.Buffer)); !errors.Is(err, ErrTooLarge) {
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
		if _, err := decode(plain, "identity", len(plain)-1, new(bytes.Buffer)); !errors.Is(err, ErrTooLarge) {
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
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		if errors.Is(err, ErrTooLarge) {
			return c.Status(413).SendString(`{"message":"Content Too Large."}`)
		}
		return c.Status(500).SendString(err.Error())
	}})
	app.Post("/api/track", func(c *fiber.Ctx) error { return DecodeBody(c, 64<<10) }, func(c *fiber.Ctx) error {
		return c.SendStatus(202)
	})
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
