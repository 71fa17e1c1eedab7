package routes

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/eventq/eventq/internal/eventqueue"
)

// Queue reads are compressed when the client asks (Accept-Encoding: zstd or gzip); identity
// stays the default and keeps the zero-copy path of pageBody.

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

var (
	zstdEncoders = sync.Pool{New: func() any {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only for invalid options
		}
		return enc
	}}
	gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}
)

// sendEncoded answers with the read's whole document, compressed with coding (as is when
// coding is "").
func sendEncoded(c *fiber.Ctx, page *eventqueue.Page, coding string) error {
	var out bytes.Buffer
	var w io.Writer = &out
	var finish func() error
	switch coding {
	case "zstd":
		enc := zstdEncoders.Get().(*zstd.Encoder)
		defer zstdEncoders.Put(enc)
		enc.Reset(&out)
		w, finish = enc, enc.Close
	case "gzip":
		gz := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(gz)
		gz.Reset(&out)
		w, finish = gz, gz.Close
	}
	if _, err := w.Write(appendPagePrefix(nil, page)); err != nil {
		return err
	}
	if _, err := page.WriteTo(w); err != nil {
		return err
	}
	if _, err := w.Write(pageSuffix); err != nil {
		return err
	}
	if finish != nil {
		if err := finish(); err != nil {
			return err
		}
		c.Set(fiber.HeaderContentEncoding, coding)
	}
	return c.Send(out.Bytes())
}
