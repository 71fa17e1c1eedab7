package routes

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/eventq/eventq/internal/httpx"
	"github.com/gofiber/fiber/v2"
	"github.com/klauspost/compress/gzip"
)

// The browser client library: static/tracker.js is its documented source, static/tracker.min.js
// what is served, minified at build time (go generate ./routes; a test checks that the two
// match).
//
//go:generate go run ../internal/jsmin/cmd/jsmin static/tracker.js static/tracker.min.js

//go:embed static/tracker.js static/tracker.min.js
var static embed.FS

// tracker is the served script: minified, and compressed (brotli and gzip) once at start.
var tracker = newStaticFile("static/tracker.min.js")

// staticFile is an embedded file with its brotli and gzip encodings and a strong validator of
// each.
type staticFile struct {
	plain, gzipped, brotlied []byte
	etag, gzipETag, brETag   string
	version                  string // the first hex digits of its hash: ?v=VERSION caches for a year
}

func newStaticFile(name string) *staticFile {
	b, err := static.ReadFile(name)
	if err != nil { // cannot happen: the file is embedded at build time
		panic(err)
	}
	var z, br bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	w.Write(b)
	w.Close()
	bw := brotli.NewWriterLevel(&br, brotli.BestCompression)
	bw.Write(b)
	bw.Close()
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:16])
	return &staticFile{
		plain: b, gzipped: z.Bytes(), brotlied: br.Bytes(),
		etag: `"` + h + `"`, gzipETag: `"` + h + `-gzip"`, brETag: `"` + h + `-br"`,
		version: h[:12],
	}
}

// TrackerVersion is the current tracker's version, for the long-cached URL
// /tracker.js?v=VERSION.
func TrackerVersion() string { return tracker.version }

// trackerJS answers GET /tracker.js with the browser client library, loadable from any
// origin, brotli- or else gzip-compressed when the client accepts it, revalidated by ETag (one
// per encoding). It is cacheable for five minutes, or for a year (immutable) at the versioned
// URL /tracker.js?v=VERSION, whose content never changes: a new tracker has a new version.
func (s *Server) trackerJS(c *fiber.Ctx) error {
	f := tracker
	c.Set(fiber.HeaderAccessControlAllowOrigin, "*")
	if v := query(c, "v"); v != "" && v == f.version {
		c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
	} else {
		c.Set(fiber.HeaderCacheControl, "public, max-age=300")
	}
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentType, "application/javascript; charset=utf-8")
	c.Vary(fiber.HeaderAcceptEncoding)
	body, etag := f.plain, f.etag
	switch ok := httpx.Accepted(c.Get(fiber.HeaderAcceptEncoding)); {
	case ok.Br:
		body, etag = f.brotlied, f.brETag
		c.Set(fiber.HeaderContentEncoding, "br")
	case ok.Gzip:
		body, etag = f.gzipped, f.gzipETag
		c.Set(fiber.HeaderContentEncoding, "gzip")
	}
	c.Set(fiber.HeaderETag, etag)
	if etagMatches(c.Get(fiber.HeaderIfNoneMatch), etag) {
		return c.SendStatus(fiber.StatusNotModified)
	}
	return c.Send(body)
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
