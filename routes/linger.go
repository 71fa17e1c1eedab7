package routes

import (
	"io"
	"net"
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

// LingeringListener wraps ln so that connections closed after a 413 close lingeringly; every
// other close is immediate.
func LingeringListener(ln net.Listener) net.Listener { return lingerListener{ln} }

type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tcp, ok := c.(*net.TCPConn); ok && err == nil {
		return &lingerConn{TCPConn: tcp}, nil
	}
	return c, err
}

// lingerConn is a TCP connection whose Close lingers once linger is set.
type lingerConn struct {
	*net.TCPConn
	linger atomic.Bool
}

// Close closes at once, or, after lingerOnClose, in the background once the client has sent
// everything (at most lingerMaxBytes, for at most lingerTimeout).
func (c *lingerConn) Close() error {
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

// lingerOnClose makes the request's connection linger when the server closes it.
func lingerOnClose(c *fiber.Ctx) {
	if lc, ok := c.Context().Conn().(*lingerConn); ok {
		lc.linger.Store(true)
	}
}

// tcpConn is the TCP connection under conn, or nil.
func tcpConn(conn net.Conn) *net.TCPConn {
	switch t := conn.(type) {
	case *lingerConn:
		return t.TCPConn
	case *net.TCPConn:
		return t
	}
	return nil
}
