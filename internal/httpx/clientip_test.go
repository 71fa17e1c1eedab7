package httpx

import (
	"io"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/gofiber/fiber/v2"
)

// X-Forwarded-For sent in several lines is one list: a client that sends its own line before
// the proxy's cannot choose the address that is stored and rate-limited.
func TestClientIPReadsEveryForwardedForLine(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("10.0.0.0/8")}
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString(ClientIP(c, trusted)) })
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"one line", []string{"198.51.100.9, 10.0.0.2"}, "198.51.100.9"},
		{"the client's line first", []string{"203.0.113.66", "198.51.100.9, 10.0.0.2"}, "198.51.100.9"},
		{"the proxy appends a line", []string{"203.0.113.66, 198.51.100.9", "10.0.0.2"}, "198.51.100.9"},
		{"the last line names the client", []string{"203.0.113.66", "198.51.100.9"}, "198.51.100.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/", nil)
			for _, l := range tc.lines {
				req.Header.Add("X-Forwarded-For", l)
			}
			res, err := app.Test(req, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			if string(got) != tc.want {
				t.Fatalf("client address %q, want %q", got, tc.want)
			}
		})
	}
}
