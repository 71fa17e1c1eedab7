package httpx

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/gofiber/fiber/v2"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"

	"github.com/eventq/eventq/internal/apperr"
)

// Request bodies sent with a Content-Encoding are decoded here, once, after the route is known
// and its rate limits and authentication have passed (a request refused by them, or for a path
// no route serves, costs no decoding), and never by Fiber's Ctx.Body (which decodes the whole body before any size check: a 100 KB
// gzip body decodes to hundreds of megabytes). Each coding is read through a limit of the
// route's own body size plus one byte, so what a body would decode to past that is never
// produced: a body over the limit is 413, and the memory a request costs is its limit plus
// the decoder's window.
//
// Brotli and zstd decoders keep a window of up to 16 and 8 MiB; at most windowedDecodes of
// them run at once, so that many clients posting such bodies cost a bounded amount of memory.
// gzip and deflate have a 32 KiB window and are not limited.

var (
	errUnsupportedEncoding = &apperr.Error{Code: apperr.UnsupportedMedia, Message: "Unsupported Media Type."}
	errBadEncoding         = &apperr.Error{Code: apperr.BadRequest, Message: "Bad Request."}
	// ErrTooLarge is a body past its route's limit.
	ErrTooLarge = &apperr.Error{Code: apperr.TooLarge, Message: "Content Too Large."}
)

// IsDecodeError reports whether err is DecodeBody's refusal of a body it could not decode.
func IsDecodeError(err error) bool {
	return err == errUnsupportedEncoding || err == errBadEncoding || err == ErrTooLarge
}

// windowedDecodes is how many brotli or zstd bodies are decoded at once by a process.
const windowedDecodes = 2

// zstdMaxWindow is the largest zstd window a body may declare (the reference encoder's
// default for its usual levels); a frame that declares more is refused as a bad encoding.
const zstdMaxWindow = 8 << 20

var (
	windowed   = make(chan struct{}, windowedDecodes)
	gzipReader = sync.Pool{}
	zstdReader = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			panic(err) // only for invalid options
		}
		return d
	}}
)

// DecodeBody replaces a request body sent with a Content-Encoding by its decoded form of at
// most limit bytes (and drops the header), runs the rest of the chain, and then gives the
// decoded body's buffer back. An unknown coding, or more than maxCodings, is 415, a body that
// decodes past limit 413, a body that is not valid in its coding 400.
func DecodeBody(c *fiber.Ctx, limit int) error {
	header := contentEncoding(c)
	if header == "" {
		return c.Next()
	}
	buf := decodeBuffers.Get().(*bytes.Buffer)
	defer putDecodeBuffer(buf) // after the handler: handlers copy what outlives them
	body, err := decode(c.Request().Body(), header, limit, buf)
	if err != nil {
		return err
	}
	c.Request().Header.Del(fiber.HeaderContentEncoding)
	c.Request().SetBodyRaw(body)
	err = c.Next()
	c.Request().SetBodyRaw(nil) // the buffer goes back to the pool
	return err
}

// decodeBuffers hold decoded bodies: a body decodes into a buffer of its route's limit at most,
// reused by the next request, so that many requests decoding to their limit (or past it) do
// not each leave that much garbage behind.
var decodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBuffer is the largest buffer decodeBuffers keeps: one of the largest body any
// route takes (routes' maxBodyBytes).
const maxPooledBuffer = 1<<20 + bytes.MinRead + 1

// putDecodeBuffer returns buf to decodeBuffers.
func putDecodeBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBuffer {
		buf.Reset()
		decodeBuffers.Put(buf)
	}
}

// contentEncoding is the request's Content-Encoding, its header lines joined as one list.
func contentEncoding(c *fiber.Ctx) string {
	lines := c.Request().Header.PeekAll(fiber.HeaderContentEncoding)
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return string(lines[0])
	}
	all := make([]string, len(lines))
	for i, l := range lines {
		all[i] = string(l)
	}
	return strings.Join(all, ",")
}

// maxCodings is the most content codings a request may list: stacked codings cost a decoder
// each and gain a sender nothing.
const maxCodings = 2

// decode undoes the codings of a Content-Encoding header value (listed in the order they were
// applied) on body, producing at most limit bytes (more is ErrTooLarge). The last coding is
// decoded into buf, whose bytes the result then is.
func decode(body []byte, header string, limit int, buf *bytes.Buffer) ([]byte, error) {
	var codings []string
	listed := 0
	for rest := header; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, ",")
		coding := strings.ToLower(strings.TrimSpace(part))
		if coding == "" {
			continue
		}
		if listed++; listed > maxCodings { // refused before the rest is even read
			return nil, errUnsupportedEncoding
		}
		switch coding {
		case "identity":
		case "gzip", "x-gzip", "deflate", "br", "zstd":
			codings = append(codings, coding)
		default:
			return nil, errUnsupportedEncoding
		}
	}
	for i := len(codings) - 1; i >= 0; i-- {
		out := buf
		if i > 0 { // an intermediate form: its own buffer
			out = new(bytes.Buffer)
		}
		if err := decodeOne(body, codings[i], limit, out); err != nil {
			return nil, err
		}
		body = out.Bytes()
	}
	if len(body) > limit {
		return nil, ErrTooLarge
	}
	return body, nil
}

// decodeOne decodes body in one coding into out, reading at most limit+1 bytes of its output.
func decodeOne(body []byte, coding string, limit int, out *bytes.Buffer) error {
	var (
		r       io.Reader
		release func()
	)
	switch coding {
	case "gzip", "x-gzip":
		zr, _ := gzipReader.Get().(*gzip.Reader)
		if zr == nil {
			zr = new(gzip.Reader)
		}
		if err := zr.Reset(bytes.NewReader(body)); err != nil {
			return errBadEncoding
		}
		zr.Multistream(true)
		r, release = zr, func() { gzipReader.Put(zr) }
	case "deflate":
		// RFC 9110's deflate is the zlib format; some clients send a raw DEFLATE stream.
		r, release = zlibOrRaw(body), func() {}
	case "br":
		windowed <- struct{}{}
		r, release = brotli.NewReader(bytes.NewReader(body)), func() { <-windowed }
	case "zstd":
		windowed <- struct{}{}
		d := zstdReader.Get().(*zstd.Decoder)
		if err := d.Reset(bytes.NewReader(body)); err != nil {
			zstdReader.Put(d)
			<-windowed
			return errBadEncoding
		}
		r, release = d, func() { d.Reset(nil); zstdReader.Put(d); <-windowed }
	}
	defer release()
	out.Reset()
	out.Grow(min(limit+1, 4*len(body)+bytes.MinRead))
	_, err := out.ReadFrom(io.LimitReader(r, int64(limit)+1))
	switch {
	case out.Len() > limit:
		return ErrTooLarge
	case err != nil && !errors.Is(err, io.EOF):
		return errBadEncoding
	}
	return nil
}

// zlibOrRaw reads body as a zlib stream when its two-byte header says so, else as raw DEFLATE.
func zlibOrRaw(body []byte) io.Reader {
	if len(body) >= 2 && body[0]&0x0f == 8 && (uint16(body[0])<<8|uint16(body[1]))%31 == 0 {
		return flate.NewReader(bytes.NewReader(body[2:])) // the Adler-32 trailer is left unread
	}
	return flate.NewReader(bytes.NewReader(body))
}
