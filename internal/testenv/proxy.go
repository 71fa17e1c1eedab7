package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// StartProxy forwards loopback TCP connections to target, for a test that holds back or cuts
// what a server sends: what the client sends goes to target as it comes, and reply copies what
// target sends back to the client and closes the client's side as it sees fit. It returns the
// address to dial; the proxy stops with the test.
func StartProxy(t testing.TB, target string, reply func(client, server net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(server, client); server.Close(); client.Close() }()
			go func() { defer wg.Done(); reply(client, server) }()
		}
	}()
	return ln.Addr().String()
}
