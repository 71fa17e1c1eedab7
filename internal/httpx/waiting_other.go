//go:build !unix

package httpx

import "net"

// waiting reports true where the socket cannot be peeked: CloseUnused then closes nothing.
func waiting(*net.TCPConn) bool { return true }
