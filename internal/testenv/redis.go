// Package testenv starts the real servers tests run against: redis-server and Postgres on free
// loopback ports in temp dirs, and a fresh database per test (SQLite or Postgres, chosen by
// EVENTQ_TEST_DB). Nothing here is faked.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// Redis is a redis-server owned by one test. Stop and Start simulate an outage on the same
// port; the server is killed when the test ends.
type Redis struct {
	t    testing.TB
	Port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server for t and waits until it answers PING.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: install the Debian package redis-server (make test does this)")
	}
	r := &Redis{t: t, Port: FreePort(t), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// URL is the redis:// URL of database 0.
func (r *Redis) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Addr is host:port.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// Client returns a client closed at the end of the test.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// Start (re)starts the server on its port and waits for PING.
//
// Every write reaches the append-only file before its reply (Redis writes the file before
// answering under appendfsync no too; it only leaves flushing to disk to the kernel), so a
// Stop, a Kill or a Wipe sees exactly what an fsync per write would give, without waiting a disk
// flush (milliseconds) for each write.
func (r *Redis) Start() {
	r.t.Helper()
	cmd, err := StartRedisServer(r.Port, r.dir, "--appendonly", "yes", "--appendfsync", "no")
	if err != nil {
		r.t.Fatal(err)
	}
	r.cmd = cmd
}

// ErrRedisExited says a redis-server exited before it answered PING: its port (or, in
// cluster mode, its bus port) was taken in the meantime, make test starting many servers at
// once. The error carries what the server printed.
var ErrRedisExited = errors.New("redis-server exited at its start")

// StartRedisServer starts redis-server on a loopback port with its files in dir, plus args,
// and waits up to 10 s until it answers PING. The server dies with the calling process; the
// caller waits for it (cmd.Wait) once it is stopped. A server that exits before it answers is
// reaped here, and the error wraps ErrRedisExited.
func StartRedisServer(port int, dir string, args ...string) (*exec.Cmd, error) {
	args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--dir", dir, "--loglevel", "warning"}, args...)
	cmd := exec.Command("redis-server", args...)
	var out bytes.Buffer // read only once the server has exited
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if exited(cmd) {
			cmd.Wait()
			return nil, fmt.Errorf("redis-server on port %d: %w: %s", port, ErrRedisExited, bytes.TrimSpace(out.Bytes()))
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10s", port)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, nil
}

// exited reports whether cmd's process has exited, without reaping it: its Wait is left to
// whoever owns it.
func exited(cmd *exec.Cmd) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

// Wipe restarts the server empty, as one without persistence would come back: its files are
// deleted between the stop and the start.
func (r *Redis) Wipe() {
	r.t.Helper()
	r.Stop()
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(r.dir, e.Name())); err != nil {
			r.t.Fatal(err)
		}
	}
	r.Start()
}

// Stop shuts the server down (SIGTERM) and waits for it to exit; its data survives in the
// append-only file for the next Start. Safe to call when stopped.
func (r *Redis) Stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGCONT) // a paused server would never see the SIGTERM
	r.cmd.Process.Signal(syscall.SIGTERM)
	r.cmd.Wait()
	r.cmd = nil
}

// Kill ends the server with SIGKILL, as a crash would: what it has not written to its
// append-only file is lost (the tests' servers write it before every reply, see Start; a
// killed process loses nothing the kernel already has). Safe when stopped.
func (r *Redis) Kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

// Pause stops the server's process (SIGSTOP): it accepts connections but answers nothing,
// like a hung server or a network that drops packets. Resume ends the pause.
func (r *Redis) Pause() { r.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (r *Redis) Resume() { r.cmd.Process.Signal(syscall.SIGCONT) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Tests stop Redis on purpose; go-redis's reconnect chatter would bury the test output.
func init() { redis.SetLogger(quietLogger{}) }

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Eventually polls cond every 10 ms until it holds or timeout passes, then fails naming what.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Within polls cond every 10 ms as Eventually does, for up to timeout, and fails unless the
// first poll at which it held began within bound of since. It is for "within N seconds"
// promises made to a client: what counts is when the request that saw the change was sent,
// not how long a loaded machine took to answer it.
func Within(t testing.TB, since time.Time, bound, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sent := time.Now()
		if cond() {
			if took := sent.Sub(since); took > bound {
				t.Fatalf("%s: first seen by a poll sent %s after the change, want within %s", what, took, bound)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
