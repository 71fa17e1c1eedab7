package httpx

import (
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Queue reads are compressed when the client asks (Accept-Encoding: zstd or gzip) and the body
// is large enough to gain from it; identity stays the default and keeps the zero-copy path of
// the page bodies (routes). How the compression itself runs is in compress.go.

// Codings are the content codings eventq offers that an Accept-Encoding header value accepts.
type Codings struct{ Zstd, Gzip, Br bool }

// Accepted reports which of the codings eventq offers an Accept-Encoding header value
// accepts. A coding with q=0 is refused; other q-values are not ranked.
func Accepted(header string) (ok Codings) {
	if header == "" {
		return ok
	}
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(part, ";")
		if refused(params) {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "zstd":
			ok.Zstd = true
		case "gzip", "x-gzip":
			ok.Gzip = true
		case "br":
			ok.Br = true
		}
	}
	return ok
}

// Encoding is the content coding to answer a queue read with: "zstd" when accepted, else
// "gzip" when accepted, else "" (identity).
func Encoding(c *fiber.Ctx) string {
	switch ok := Accepted(c.Get(fiber.HeaderAcceptEncoding)); {
	case ok.Zstd:
		return "zstd"
	case ok.Gzip:
		return "gzip"
	}
	return ""
}

// refused reports whether the parameters of an Accept-Encoding element say q=0.
func refused(params string) bool {
	for _, p := range strings.Split(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && q == 0
		}
	}
	return false
}
