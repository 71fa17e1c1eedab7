package routes

import (
	"bytes"
	"net"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/httpx"
)

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
		if conn := httpx.TCPConn(c.Context().Conn()); conn != nil {
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
		body := &pageBody{page: page, conn: httpx.TCPConn(c.Context().Conn()), prefix: prefix}
		page.Events = append(page.Events, pageSuffix)
		c.Response().SetBodyStream(body, size)
		return nil
	}
	parts := make(net.Buffers, 0, len(page.Events)+2)
	parts = append(append(append(parts, prefix), page.Events...), pageSuffix)
	body := httpx.CompressBody(coding, parts, httpx.SegmentSize, page.Release)
	c.Set(fiber.HeaderContentEncoding, coding)
	if size < httpx.SegmentSize {
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
