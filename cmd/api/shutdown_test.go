package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/testenv"
)

// A connection that a client opened and never used (browsers open them speculatively; Go's
// client keeps one it dialled and then did not need) does not hold the shutdown: the server
// closes it, and the drain ends without reaching its timeout (which made Run return "context
// deadline exceeded" after 10 s), while a request sent before the shutdown is answered.
func TestShutdownDoesNotWaitForAnUnusedConnection(t *testing.T) {
	_, dbURL := testenv.DB(t)
	r := testenv.StartRedis(t)
	cfg, err := config.Load(append([]string{"HTTP_ADDR=127.0.0.1:0", "METRICS_ADDR=off", "DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL()}, testenv.NoRateLimits...))
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	m := NewMain(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	testenv.Must(t, m.Open())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()

	// One connection never used, then one used for a request, answered and kept alive: the
	// server accepts in order, so the first is accepted once the second is answered.
	unused, err := net.Dial("tcp", m.Addr())
	testenv.Must(t, err)
	defer unused.Close()
	used, err := net.Dial("tcp", m.Addr())
	testenv.Must(t, err)
	defer used.Close()
	if _, err := used.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	used.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := used.Read(make([]byte, 12)); err != nil {
		t.Fatalf("no answer to the request: %v", err)
	}

	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run after the shutdown: %v", err)
	}
	unused.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := unused.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatalf("the unused connection is still open (read %d bytes, %v)", n, err)
	}
	// Closing it is not an error of the server's: nothing at level ERROR.
	if out := logs.String(); strings.Contains(out, "level=ERROR") {
		t.Fatalf("the shutdown logged an error:\n%s", out)
	}
}

// A shutdown that comes before the server has begun serving (a SIGTERM right after the start)
// returns without an error and leaves the port closed. It panicked: the serving goroutine read
// the server Close had already cleared.
func TestAShutdownBeforeServingReturns(t *testing.T) {
	_, dbURL := testenv.DB(t)
	r := testenv.StartRedis(t)
	cfg, err := config.Load(append([]string{"HTTP_ADDR=127.0.0.1:0", "METRICS_ADDR=off", "DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL()}, testenv.NoRateLimits...))
	testenv.Must(t, err)
	m := NewMain(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	testenv.Must(t, m.Open())
	addr := m.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, "the port is closed", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}
