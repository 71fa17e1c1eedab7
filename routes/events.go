package routes

import (
	"io"
	"net"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/validate"
)

var emptyRead = []byte(`{"data":{"count":0,"events":[]}}`)

// readEvents answers GET /api/platform/events: up to 10,000 events from the front of the
// tenant's queue, without removing them. The stored JSON of each event is written as is.
func (s *Server) readEvents(c *fiber.Ctx) error {
	tenantID := principal(c).TenantID
	active, err := s.Flags.Active(c.UserContext(), features.UseQueueEvents, tenantID)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	if !active {
		return c.Send(emptyRead)
	}
	page, err := s.Queue.ReadPage(c.UserContext(), tenantID)
	if err != nil {
		return err
	}
	body := &pageBody{page: page, conn: tcpConn(c.Context().Conn())}
	body.prefix = append(body.prefix, `{"data":{"count":`...)
	body.prefix = strconv.AppendInt(body.prefix, int64(page.Count), 10)
	body.prefix = append(body.prefix, `,"events":[`...)
	page.Events = append(page.Events, []byte("]}}"))
	c.Response().SetBodyStream(body, len(body.prefix)+page.Size+3)
	s.Metrics.Read(page.Count)
	return nil
}

// pageBody is a queue read's response body: the page's events inside the JSON document.
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

// trimEvents answers DELETE /api/platform/events?count=N: removes exactly the first N events.
// With UseQueueEvents inactive it is a no-op.
func (s *Server) trimEvents(c *fiber.Ctx) error {
	var errs apperr.FieldErrors
	var count int64
	if raw := validate.EmptyToNil(query(c, "count")); raw == nil {
		validate.Required(&errs, "count")
	} else {
		count, _ = validate.Integer(&errs, "count", raw, 1)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	tenantID := principal(c).TenantID
	active, err := s.Flags.Active(c.UserContext(), features.UseQueueEvents, tenantID)
	if err != nil {
		return err
	}
	if active {
		if err := s.Queue.Trim(c.UserContext(), tenantID, count); err != nil {
			return err
		}
		s.Metrics.Trimmed(count)
	}
	return c.SendStatus(fiber.StatusNoContent)
}
