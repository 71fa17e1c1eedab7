package testenv

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
)

// Backend is the database the suite runs on: EVENTQ_TEST_DB=postgres or sqlite (default).
func Backend() string {
	if os.Getenv("EVENTQ_TEST_DB") == "postgres" {
		return "postgres"
	}
	return "sqlite"
}

// DatabaseURL returns the DATABASE_URL of a fresh, migrated database for t: a SQLite file in a
// temp dir, or a new database on the package's Postgres server.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	var url string
	if Backend() == "postgres" {
		url = postgresDatabase(t)
	} else {
		url = "sqlite://" + filepath.Join(t.TempDir(), "eventq.db")
	}
	db, err := database.Open(url)
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	defer database.Close(db)
	if err := database.Migrate(db); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return url
}

// DB opens a fresh, migrated database for t, closed when the test ends.
func DB(t testing.TB) (*gorm.DB, string) {
	t.Helper()
	url := DatabaseURL(t)
	db, err := database.Open(url)
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(func() { database.Close(db) })
	return db, url
}

// Main runs a package's tests and then stops the servers shared by them. Call it from
// TestMain in every package that uses DatabaseURL.
func Main(m interface{ Run() int }) {
	code := m.Run()
	pg.stop()
	os.Exit(code)
}

type postgresServer struct {
	once   sync.Once
	err    error
	dir    string
	port   int
	cmd    *exec.Cmd
	admin  *sql.DB
	serial atomic.Int64
}

var pg postgresServer

func postgresDatabase(t testing.TB) string {
	t.Helper()
	pg.once.Do(pg.start)
	if pg.err != nil {
		t.Fatalf("postgres: %v", pg.err)
	}
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), pg.serial.Add(1))
	if _, err := pg.admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, name)
}

// PostgresBin finds the directory of postgres and initdb (Debian keeps them off PATH).
func PostgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", fmt.Errorf("initdb not found: install the Debian package postgresql (make test does this)")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

func (s *postgresServer) start() {
	bin, err := PostgresBin()
	if err != nil {
		s.err = err
		return
	}
	s.dir, err = os.MkdirTemp("", "eventq-pg-")
	if err != nil {
		s.err = err
		return
	}
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 { // initdb refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			s.err = fmt.Errorf("running as root needs the postgres user: %w", err)
			return
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(s.dir, uid, gid); err != nil {
			s.err = err
			return
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(s.dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = attr
	if out, err := initdb.CombinedOutput(); err != nil {
		s.err = fmt.Errorf("initdb: %v: %s", err, out)
		return
	}
	s.port = freePort()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(s.port),
		"-k", s.dir, "-h", "127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300")
	s.cmd.SysProcAttr = attr
	if err := s.cmd.Start(); err != nil {
		s.err = fmt.Errorf("start postgres: %w", err)
		return
	}
	s.admin, _ = sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port))
	deadline := time.Now().Add(30 * time.Second)
	for s.admin.Ping() != nil {
		if time.Now().After(deadline) {
			s.err = fmt.Errorf("postgres did not accept connections within 30s")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *postgresServer) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		s.cmd.Wait()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
