package routes

import (
	"bytes"
	"net"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/eventqueue"
)

// Queue reads are compressed when the client asks (Accept-Encoding: zstd or gzip) and the body
// is large enough to gain from it; identity stays the default and keeps the zero-copy path of
// pageBody. How the compression itself runs is in compress.go.

// codings are the content codings eventq offers that an Accept-Encoding header value accepts.
type codings struct{ zstd, gzip, br bool }

// accepted reports which of the codings eventq offers an Accept-Encoding header value
// accepts. A coding with q=0 is refused; other q-values are not ranked.
func accepted(header string) (ok codings) {
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
			ok.zstd = true
		case "gzip", "x-gzip":
			ok.gzip = true
		case "br":
			ok.br = true
		}
	}
	return ok
}

// encoding is the content coding to answer a queue read with: "zstd" when accepted, else
// "gzip" when accepted, else "" (identity).
func encoding(c *fiber.Ctx) string {
	switch ok := accepted(c.Get(fiber.HeaderAcceptEncoding)); {
	case ok.zstd:
		return "zstd"
	case ok.gzip:
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

// minCompress is the body size under which a read is answered as is whatever the client
// accepts: such a body fits in one packet anyway, and its gzip or zstd form saves at most a few
// hundred bytes (the empty page grows).
const minCompress = 1 << 10

// sendPage answers with the read's whole document, compressed with coding when coding is not
// "" and the document is at least minCompress bytes. A document of one segment is compressed
// before the status is sent, with its Content-Length; a larger one is sent chunked, each
// segment as soon as it is compressed. An identity page of streamFrom events or more whose
// events are still arriving from Redis is sent chunked as they arrive (streamedBody); a
// smaller one is read whole and sent with its Content-Length. The page is released once
// written.
func sendPage(c *fiber.Ctx, page *eventqueue.Page, coding string) error {
	prefix := appendPagePrefix(nil, page)
	if coding == "" && page.Pending() && page.Count >= streamFrom {
		if conn := tcpConn(c.Context().Conn()); conn != nil {
			c.Response().ImmediateHeaderFlush = true
			c.Response().SetBodyStream(&streamedBody{prefix: prefix, page: page, conn: conn}, -1)
			return nil
		}
	}
	if err := page.Fill(); err != nil {
		page.Release()
		return err
	}
	size := len(prefix) + page.Size + len(pageSuffix)
	if coding == "" || size < minCompress {
		body := &pageBody{page: page, conn: tcpConn(c.Context().Conn()), prefix: prefix}
		page.Events = append(page.Events, pageSuffix)
		c.Response().SetBodyStream(body, size)
		return nil
	}
	parts := make(net.Buffers, 0, len(page.Events)+2)
	parts = append(append(append(parts, prefix), page.Events...), pageSuffix)
	body := compressBody(coding, parts, segmentSize, page.Release)
	c.Set(fiber.HeaderContentEncoding, coding)
	if size < segmentSize {
		defer body.Close()
		var out bytes.Buffer
		if _, err := out.ReadFrom(body); err != nil {
			return err
		}
		return c.Send(out.Bytes())
	}
	c.Response().SetBodyStream(body, -1)
	return nil
}
