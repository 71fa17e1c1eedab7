package database_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
)

// A Redis command whose reply did not come in time (the lease's read of a connection past its
// deadline, wrapped as the queue store wraps it) is a dependency out of reach, answered 503 as
// docs/consuming.md says of a lease answer that is lost; a malformed reply is not.
func TestUnavailableCoversAReadTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1)) // answers nothing until the client closes
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("the read answered %v, want a timeout", err)
	}
	if lost := fmt.Errorf("eventqueue: lease: %w", err); !database.Unavailable(lost) {
		t.Fatalf("Unavailable(%v) = false, want true", lost)
	}
	if bad := errors.New("eventqueue: lease: script answered 13 values"); database.Unavailable(bad) {
		t.Fatalf("Unavailable(%v) = true, want false", bad)
	}
}
