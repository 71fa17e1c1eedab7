package routes

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"strings"

	"github.com/gofiber/fiber/v2"
)

//go:embed static/tracker.js
var static embed.FS

// trackerSource is the browser client library, and trackerETag a strong validator of it.
var trackerSource, trackerETag = func() ([]byte, string) {
	b, err := static.ReadFile("static/tracker.js")
	if err != nil { // cannot happen: the file is embedded at build time
		panic(err)
	}
	sum := sha256.Sum256(b)
	return b, `"` + hex.EncodeToString(sum[:16]) + `"`
}()

// trackerJS answers GET /tracker.js with the browser client library: cacheable for five
// minutes, revalidated by ETag, loadable from any origin.
func (s *Server) trackerJS(c *fiber.Ctx) error {
	c.Set(fiber.HeaderAccessControlAllowOrigin, "*")
	c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	c.Set(fiber.HeaderETag, trackerETag)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentType, "application/javascript; charset=utf-8")
	if etagMatches(c.Get(fiber.HeaderIfNoneMatch), trackerETag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	return c.Send(trackerSource)
}

// etagMatches reports whether an If-None-Match header value names etag, by the weak
// comparison RFC 9110 prescribes for it ("*", lists, W/ prefixes).
func etagMatches(header, etag string) bool {
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
			return true
		}
	}
	return false
}
