package httpx

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
)

// When the server refuses a body that is too large, it answers 413 before it has read the
// body and then closes the connection. Closing a socket with unread data makes the kernel
// send a reset, which can reach the client before it reads the 413: it sees "connection reset"
// or "broken pipe" and never learns why. A lingering close (as nginx and Go's net/http do)
// first half-closes, then reads and discards what the client is still sending, so the client
// finishes its write and reads the answer.
const (
	lingerTimeout  = 5 * time.Second
	lingerMaxBytes = 64 << 20
)

// Listener is the api's listener: connections closed after a 413 close lingeringly (every
// other close is immediate), and CloseUnused closes those that never sent a byte.
type Listener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*lingerConn]struct{} // open, not yet closed by the server
}

// LingeringListener wraps ln.
func LingeringListener(ln net.Listener) *Listener {
	return &Listener{Listener: ln, conns: map[*lingerConn]struct{}{}}
}

// Accept returns the next connection, tracked until it is closed.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tcp, ok := c.(*net.TCPConn); ok && err == nil {
		lc := &lingerConn{TCPConn: tcp, ln: l}
		l.mu.Lock()
		l.conns[lc] = struct{}{}
		l.mu.Unlock()
		return lc, nil
	}
	return c, err
}

// CloseUnused closes the connections on which the client has sent nothing yet (not a byte read,
// none waiting in the socket) and reports how many. A graceful shutdown calls it while it
// waits: the server waits for every connection that is not idle between two requests, and a
// connection that a client opened and never used (browsers open them speculatively, HTTP
// clients keep one they dialled and then did not need) counts as busy until it sends a
// request, so the shutdown waited its whole timeout for it.
func (l *Listener) CloseUnused() int {
	l.mu.Lock()
	var unused []*lingerConn
	for c := range l.conns {
		if !c.used.Load() && !waiting(c.TCPConn) {
			unused = append(unused, c)
		}
	}
	l.mu.Unlock()
	for _, c := range unused {
		c.Close()
	}
	return len(unused)
}

// lingerConn is a TCP connection whose Close lingers once linger is set.
type lingerConn struct {
	*net.TCPConn
	ln     *Listener
	linger atomic.Bool
	used   atomic.Bool // a byte was read
	closed atomic.Bool
}

// Read reads from the connection and notes that it was used.
func (c *lingerConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if n > 0 && !c.used.Load() {
		c.used.Store(true)
	}
	return n, err
}

// Close closes at once, or, after LingerOnClose, in the background once the client has sent
// everything (at most lingerMaxBytes, for at most lingerTimeout).
func (c *lingerConn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	c.ln.mu.Lock()
	delete(c.ln.conns, c)
	c.ln.mu.Unlock()
	if !c.linger.Load() {
		return c.TCPConn.Close()
	}
	go func() {
		c.TCPConn.CloseWrite()
		c.TCPConn.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.CopyN(io.Discard, c.TCPConn, lingerMaxBytes)
		c.TCPConn.Close()
	}()
	return nil
}

// LingerOnClose makes the request's connection linger when the server closes it.
func LingerOnClose(c *fiber.Ctx) {
	if lc, ok := c.Context().Conn().(*lingerConn); ok {
		lc.linger.Store(true)
	}
}

// TCPConn is the TCP connection under conn, or nil.
func TCPConn(conn net.Conn) *net.TCPConn {
	switch t := conn.(type) {
	case *lingerConn:
		return t.TCPConn
	case *net.TCPConn:
		return t
	}
	return nil
}
