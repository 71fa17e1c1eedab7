package testenv

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
		return StartPostgres()
	}
	unlock, err := lockFile(filepath.Join(dir, "server.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	info := filepath.Join(dir, "server")
	if b, err := os.ReadFile(info); err == nil {
		s := &Postgres{lockPath: filepath.Join(dir, "template.lock")}
		var pid int
		if _, err := fmt.Sscan(string(b), &s.Port, &pid, &s.dir); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", info, b, err)
		}
		s.admin, _ = sql.Open("pgx", s.URL("postgres"))
		if err := s.admin.Ping(); err != nil {
			return nil, fmt.Errorf("the shared Postgres server on port %d: %w", s.Port, err)
		}
		return s, nil
	}
	s, err := startPostgres(true)
	if err != nil {
		return nil, err
	}
	s.lockPath = filepath.Join(dir, "template.lock")
	line := fmt.Sprintf("%d %d %s\n", s.Port, s.cmd.Process.Pid, s.dir)
	if err := os.WriteFile(info, []byte(line), 0o600); err != nil {
		s.Stop()
		return nil, err
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
		if _, err := s.admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			errs = append(errs, err)
		}
	}
	s.admin.Close()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: drop this binary's databases on the shared Postgres server: %v\n", err)
	}
}
