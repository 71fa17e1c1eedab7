package testenv

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: a child process's output copier (or
// any other goroutine) writes while the test reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// BuildBinaries builds the main packages pkgs, given as import paths (for example
// "github.com/eventq/eventq/cmd/api"), into a new temp dir with one `go build`, so that the
// caller's working directory does not matter. Each binary is named after the last element of
// its import path. cleanup removes the dir; on error there is nothing to clean up.
//
// When EVENTQ_TEST_BIN names a directory (make test builds ./cmd/... there once for both
// suites), the binaries are taken from it instead and cleanup leaves it alone.
func BuildBinaries(pkgs ...string) (dir string, cleanup func(), err error) {
	if dir := os.Getenv("EVENTQ_TEST_BIN"); dir != "" {
		for _, pkg := range pkgs {
			if _, err := os.Stat(filepath.Join(dir, path.Base(pkg))); err != nil {
				return "", nil, fmt.Errorf("EVENTQ_TEST_BIN: %w", err)
			}
		}
		return dir, func() {}, nil
	}
	dir, err = os.MkdirTemp("", "eventq-test-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build %v: %v\n%s", pkgs, err, out)
	}
	return dir, cleanup, nil
}

// Process is a binary run as a child process of a test. Its stdout and stderr go to a log,
// kept across restarts and shown when the test fails; it is stopped when the test ends and
// killed if the test binary dies.
type Process struct {
	t    testing.TB
	name string
	path string
	env  []string
	cmd  *exec.Cmd
	log  SyncBuffer
}

// NewProcess prepares binPath to run with exactly env (pass os.Environ() plus extras to
// inherit the test's environment). Call Start to run it.
func NewProcess(t testing.TB, binPath string, env []string) *Process {
	p := &Process{t: t, name: filepath.Base(binPath), path: binPath, env: env}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", p.name, p.log.String())
		}
	})
	return p
}

// Start runs the process.
func (p *Process) Start() {
	p.t.Helper()
	p.cmd = exec.Command(p.path)
	p.cmd.Env = p.env
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
}

// Stop sends SIGTERM and waits for the process to exit. Safe to call when stopped.
func (p *Process) Stop() { p.end(syscall.SIGTERM) }

// Kill sends SIGKILL, so no shutdown code runs, and waits. Safe to call when stopped.
func (p *Process) Kill() { p.end(syscall.SIGKILL) }

func (p *Process) end(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	p.cmd.Wait()
	p.cmd = nil
}

// Log is the process's output so far.
func (p *Process) Log() string { return p.log.String() }

// WaitHTTP polls GET url until it answers 200, failing t after timeout.
func WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, url+" answers 200", func() bool {
		res, err := http.Get(url)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
}

// NoRateLimits switches the api's rate limits off: tests that are not about limits send
// faster than the defaults allow from one address.
var NoRateLimits = []string{"RATE_LIMIT_TRACK=off", "RATE_LIMIT_TRACK_IP=off", "RATE_LIMIT_PLATFORM=off",
	"RATE_LIMIT_RETURN=off", "RATE_LIMIT_AUTH_FAILURES=off"}
