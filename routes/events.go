package routes

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/validate"
)

// maxWait is the longest a read of an empty queue may be held (the wait parameter, seconds).
const maxWait = 20

// readEvents answers GET /api/platform/events: up to limit (default and most 10,000) events
// from the front of the tenant's queue, without removing them, with the queue's front offset
// in Queue-Offset. With wait, a read of an empty queue is held until an event arrives or wait
// seconds pass. The stored JSON of each event is written as is, compressed if asked.
func (s *Server) readEvents(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	limit := validate.OptionalInteger(&errs, "limit", query(c, "limit"), 1, eventqueue.MaxRead, eventqueue.MaxRead)
	wait := validate.OptionalInteger(&errs, "wait", query(c, "wait"), 0, maxWait, 0)
	if err := errs.Err(); err != nil {
		return err
	}
	page, active, err := s.Queues.Read(c.UserContext(), principal(c).TenantID, int(limit), time.Duration(wait)*time.Second)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Vary(fiber.HeaderAcceptEncoding)
	if active {
		c.Set(headerQueueOffset, strconv.FormatInt(page.Offset, 10))
		s.Metrics.Read(page.Count)
	}
	return sendPage(c, page, httpx.Encoding(c))
}

// headerQueueOffset carries a queue's front offset on reads and trims.
const headerQueueOffset = "Queue-Offset"

var pageSuffix = []byte("]}}")

// appendPagePrefix appends the response document's bytes before the page's events.
func appendPagePrefix(b []byte, page *eventqueue.Page) []byte {
	b = append(b, `{"data":{"count":`...)
	b = strconv.AppendInt(b, int64(page.Count), 10)
	return append(b, `,"events":[`...)
}

// pageBody is a queue read's identity body: the page's events inside the JSON document.
// fasthttp writes it with WriteTo and then closes it, which releases the page.
type pageBody struct {
	prefix []byte
	page   *eventqueue.Page // its Events end with the document's closing bytes
	conn   *net.TCPConn     // the client's connection, nil when it is not TCP
}

// directWrite is the body size from which the events skip fasthttp's write buffer.
const directWrite = 64 << 10

// WriteTo writes the body to w, fasthttp's buffered writer on conn. A large page on a TCP
// connection goes out with writev, straight from the buffers Redis's reply was read into; a
// small one leaves with the headers.
func (b *pageBody) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b.prefix)
	if err != nil {
		return int64(n), err
	}
	bw, buffered := w.(interface{ Flush() error })
	if tcp := b.conn; tcp != nil && buffered && b.page.Size >= directWrite {
		if err := bw.Flush(); err != nil {
			return int64(n), err
		}
		m, err := b.page.WriteTo(tcp)
		return int64(n) + m, err
	}
	m, err := b.page.WriteTo(w)
	return int64(n) + m, err
}

// Read is there for io.Reader; fasthttp uses WriteTo.
func (b *pageBody) Read(p []byte) (int, error) {
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	return b.page.Events.Read(p)
}

// Close releases the page.
func (b *pageBody) Close() error {
	b.page.Release()
	return nil
}

// streamFrom is the event count from which an identity read is streamed: from about 380 KB of
// typical events, sending the first events while Redis still sends the last saves more than
// the chunked framing costs; under it the page is read whole and sent with its length.
const streamFrom = 1000

// streamedBody is a large identity read sent as Redis's reply arrives: chunked, each run of
// events that came in one read from Redis written as one chunk with one writev, straight from
// the buffers it was read into.
type streamedBody struct {
	prefix []byte
	page   *eventqueue.Page
	conn   *net.TCPConn
	done   bool
}

// Read writes the whole body on the connection, then reports its end. fasthttp calls it for a
// chunked body once the status and headers are flushed (ImmediateHeaderFlush) and would make
// each Read's bytes one chunk of at most 4 KiB, written and flushed alone; instead the chunks
// go out from here, and fasthttp writes only the last, empty one when Read answers io.EOF. An
// error (Redis failed mid-page, the client left) is returned instead: fasthttp then closes the
// connection without that last chunk, so the client sees a cut body, never a short one that
// looks whole.
func (b *streamedBody) Read([]byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	b.done = true
	var head [20]byte
	bufs := make(net.Buffers, 0, 256)
	first := b.prefix
	err := b.page.Stream(func(events net.Buffers, last bool) error {
		var tail []byte
		if last {
			tail = pageSuffix
		}
		size := len(first) + len(tail)
		for _, e := range events {
			size += len(e)
		}
		if size == 0 {
			return nil // an empty chunk would end the body
		}
		bufs = append(bufs[:0], append(strconv.AppendInt(head[:0], int64(size), 16), '\r', '\n'), first)
		bufs = append(append(bufs, events...), tail, crlf)
		first = nil
		_, err := bufs.WriteTo(b.conn) // writev, skipping the empty slices
		return err
	})
	if err != nil {
		return 0, err
	}
	return 0, io.EOF
}

// Close releases the page.
func (b *streamedBody) Close() error {
	b.page.Release()
	return nil
}

var crlf = []byte("\r\n")

// trimEvents answers DELETE /api/platform/events?count=N[&offset=O]: removes the first N
// events, or with an offset (a read's Queue-Offset) those up to absolute position O+N that are
// still there, so a retried trim removes nothing more. Answers 204 with the new front offset.
// With UseQueueEvents inactive it is a no-op.
func (s *Server) trimEvents(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	count := requiredCount(c, &errs)
	offset := int64(-1)
	if raw := query(c, "offset"); raw != "" {
		if n, ok := validate.Integer(&errs, "offset", raw, 0); ok {
			offset = n
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	trimmed, active, err := s.Queues.Trim(c.UserContext(), principal(c).TenantID, count, offset)
	var ahead *eventqueue.ErrOffsetAhead
	if errors.As(err, &ahead) {
		errs.Add("offset", fmt.Sprintf("The offset field must not be greater than %d.", ahead.Front))
		return errs.Err()
	}
	if err != nil {
		return err
	}
	if active {
		c.Set(headerQueueOffset, strconv.FormatInt(trimmed.Front, 10))
		s.Metrics.Trimmed(trimmed.Count)
	}
	return c.SendStatus(fiber.StatusNoContent)
}
