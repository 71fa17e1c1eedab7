//go:build unix

package httpx

import (
	"net"
	"syscall"
)

// waiting reports whether bytes wait unread in c's socket (or whether that cannot be told):
// a request that arrived but that the server has not read yet. It peeks without taking the
// connection's read lock, which the server's blocked read holds.
func waiting(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true
	}
	has := true
	err = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		has = n > 0 || (err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
	})
	return has || err != nil
}
