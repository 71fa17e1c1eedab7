package httpx

import (
	"io"
	"net"
	"testing"
	"time"
)

// acceptPair returns a connection accepted by l and the client's end of it.
func acceptPair(t *testing.T, l *Listener) (server net.Conn, client net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return server, client
}

// CloseUnused closes the connections whose client has sent nothing, and only those: not one
// the server has read from, nor one whose bytes wait unread in its socket.
func TestCloseUnusedClosesOnlyConnectionsNeverUsed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LingeringListener(ln)
	defer l.Close()

	unused, unusedClient := acceptPair(t, l)
	used, usedClient := acceptPair(t, l)
	pending, pendingClient := acceptPair(t, l)
	if _, err := usedClient.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(used, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if _, err := pendingClient.Write([]byte("POST /api/track HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !waiting(pending.(*lingerConn).TCPConn); {
		if time.Now().After(deadline) {
			t.Fatal("the written bytes never showed in the server's socket")
		}
		time.Sleep(time.Millisecond)
	}
	if waiting(unused.(*lingerConn).TCPConn) {
		t.Fatal("bytes seen waiting on a connection nobody wrote to")
	}

	if n := l.CloseUnused(); n != 1 {
		t.Fatalf("closed %d connections, want 1", n)
	}
	unusedClient.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := unusedClient.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the unused connection's client reads %v, want EOF", err)
	}
	for name, c := range map[string]net.Conn{"used": used, "pending": pending} {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Errorf("the %s connection was closed: %v", name, err)
		}
	}
	if n := l.CloseUnused(); n != 0 {
		t.Fatalf("a second call closed %d more", n)
	}
}
