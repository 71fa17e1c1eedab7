package testenv

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SharedPostgresEnv names a directory through which the test binaries of one suite share a
// Postgres server instead of starting one each (make test's Postgres suite sets it): the first
// binary that needs a database starts the server, detached, and writes where it is; the others
// find it there. The suite's runner stops it (the server's line is "PORT PID DIR": SIGINT PID,
// remove DIR). Each binary's databases carry its process id, and it drops them when it ends.
const SharedPostgresEnv = "EVENTQ_TEST_PG_SHARED"

// packageServer is the server a package's databases are created on: its own, or the suite's
// shared one.
func packageServer() (*Postgres, error) {
	dir := os.Getenv(SharedPostgresEnv)
	if dir == "" {
		if Backend() == "citus" {
			return StartCitus()
		}
		return StartPostgres()
	}
	unlock, err := lockFile(filepath.Join(dir, "server.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	info := filepath.Join(dir, "server")
	if b, err := os.ReadFile(info); err == nil {
		return sharedServer(info, string(b), filepath.Join(dir, "template.lock"))
	}
	start := func() (*Postgres, error) { return startPostgres(true) }
	if Backend() == "citus" {
		start = func() (*Postgres, error) { return startCitus(true) }
	}
	s, err := start()
	if err != nil {
		return nil, err
	}
	s.lockPath = filepath.Join(dir, "template.lock")
	line := fmt.Sprintf("%d %d %s", s.Port, s.cmd.Process.Pid, s.dir)
	for _, w := range s.workers {
		line += fmt.Sprintf(" %d %d %s", w.Port, w.cmd.Process.Pid, w.dir)
	}
	line += "\n"
	if err := os.WriteFile(info, []byte(line), 0o600); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// sharedServer is the server another binary started, as its line in the file info says:
// "PORT PID DIR", followed by the same of each worker node on Citus.
func sharedServer(info, line, lockPath string) (*Postgres, error) {
	f := strings.Fields(line)
	if len(f) == 0 || len(f)%3 != 0 {
		return nil, fmt.Errorf("%s: %q: want PORT PID DIR, once per server", info, line)
	}
	var servers []*Postgres
	for i := 0; i < len(f); i += 3 {
		port, err := strconv.Atoi(f[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", info, line, err)
		}
		p := &Postgres{Port: port, dir: f[i+2], lockPath: lockPath}
		p.admin, _ = sql.Open("pgx", p.URL("postgres"))
		if err := p.admin.Ping(); err != nil {
			return nil, fmt.Errorf("the shared Postgres server on port %d: %w", port, err)
		}
		servers = append(servers, p)
	}
	s := servers[0]
	if Backend() == "citus" {
		s.workers = servers[1:]
	}
	return s, nil
}

// lockFile takes an exclusive lock on path (made if missing) and returns its release. The
// lock goes with the process, so a binary that dies holding it holds nobody up.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// exclusive runs f with the template to itself: Postgres refuses to copy a database that is
// being read, by another copy or by a connection to it. On a shared server the lock is also
// taken against the other test binaries.
func (s *Postgres) exclusive(f func() error) error {
	s.copying.Lock()
	defer s.copying.Unlock()
	if s.shared() {
		unlock, err := lockFile(s.lockPath)
		if err != nil {
			return err
		}
		defer unlock()
	}
	return f()
}

// release ends this binary's use of the server: its own server stops; on a shared one, the
// databases this binary created are dropped.
func (s *Postgres) release() {
	if !s.shared() {
		s.Stop()
		return
	}
	var errs []error
	for _, name := range s.created {
		errs = append(errs, s.dropDatabase(name))
	}
	s.admin.Close()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: drop this binary's databases on the shared Postgres server: %v\n", err)
	}
}
