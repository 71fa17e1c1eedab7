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

// Backend is the database the suite runs on: EVENTQ_TEST_DB=postgres, citus (a coordinator
// with two worker nodes: CitusWorkers) or sqlite (default).
// EVENTQ_TEST_DB=none is how make test runs the packages it lists as database-free (once, not
// per database): a test there that asks for a database fails, so the list cannot go stale.
func Backend() string {
	switch os.Getenv("EVENTQ_TEST_DB") {
	case "postgres":
		return "postgres"
	case "citus":
		return "citus"
	case "none":
		return "none"
	}
	return "sqlite"
}

// OnPostgres reports whether the suite's database speaks Postgres: Postgres, or a Citus
// cluster's coordinator.
func OnPostgres() bool { return Backend() == "postgres" || Backend() == "citus" }

// OnOneDatabase marks a test whose subject does not depend on the database (the browser, the
// rate limiter, a body refused before it is read): it runs in the SQLite suite and is skipped,
// saying so, when the suite runs on Postgres.
func OnOneDatabase(t testing.TB) {
	t.Helper()
	if OnPostgres() {
		t.Skip("independent of the database: runs in the SQLite suite")
	}
}

// DatabaseURL returns the DATABASE_URL of a fresh, migrated database for t: a SQLite file in a
// temp dir, or a new database on the package's Postgres server.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	switch Backend() {
	case "postgres", "citus":
		return postgresDatabase(t, true)
	case "none":
		t.Fatal("EVENTQ_TEST_DB=none: this package is listed as database-free in scripts/test.sh, but a test asks for a database; remove it from that list")
	}
	dst := filepath.Join(t.TempDir(), "eventq.db")
	if err := copyFile(sqliteTemplate.path(t), dst); err != nil {
		t.Fatalf("copy the migrated database: %v", err)
	}
	return "sqlite://" + dst
}

// EmptyDatabaseURL is DatabaseURL without the migrations: for tests of migrating itself.
func EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	if OnPostgres() {
		return postgresDatabase(t, false)
	}
	return "sqlite://" + filepath.Join(t.TempDir(), "eventq.db")
}

// sqliteTemplate is a SQLite database migrated once per test binary; each test gets a copy of
// its file, which is much cheaper than migrating again.
var sqliteTemplate template

type template struct {
	once sync.Once
	file string
	err  error
}

func (tp *template) path(t testing.TB) string {
	t.Helper()
	tp.once.Do(func() {
		dir, err := os.MkdirTemp("", "eventq-sqlite-template-")
		if err != nil {
			tp.err = err
			return
		}
		tp.file = filepath.Join(dir, "template.db")
		tp.err = migrate("sqlite://" + tp.file)
	})
	if tp.err != nil {
		t.Fatalf("migrate the template database: %v", tp.err)
	}
	return tp.file
}

// migrate applies the migrations to the database at url and closes it; a SQLite file is
// checkpointed first, so that the file alone holds everything.
func migrate(url string) error {
	db, err := database.Open(url)
	if err != nil {
		return err
	}
	defer database.Close(db)
	if err := database.Migrate(db); err != nil {
		return err
	}
	if !database.IsPostgres(db) {
		return db.Exec("PRAGMA wal_checkpoint(TRUNCATE)").Error
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// DB opens a fresh, migrated database for t, closed when the test ends, and returns it with
// its URL. On Citus, the URL's sessions refuse a statement that touches several tenants'
// shards (RoutedOnly): the programs a test starts from it must route each tenant's work. The
// test's own handle does not: its checks count rows across tenants.
func DB(t testing.TB) (*gorm.DB, string) {
	t.Helper()
	url := DatabaseURL(t)
	db, err := database.Open(Unguarded(url))
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(func() { database.Close(db) })
	return db, url
}

// DurablePostgres starts a Postgres server of t's own, with durability on (fsync and
// synchronous_commit: an immediate shutdown must not lose a commit), for a test that halts and
// resumes it, whatever the suite's database; it creates a migrated database called name on it
// and opens it. The server stops and the database closes when the test ends.
func DurablePostgres(t testing.TB, name string) (*Postgres, *gorm.DB, string) {
	t.Helper()
	pg, err := StartPostgres("synchronous_commit=on", "fsync=on")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	url, err := pg.CreateMigratedDatabase(name)
	if err != nil {
		t.Fatal(err)
	}
	db, err := database.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { database.Close(db) })
	return pg, db, url
}

// Main runs a package's tests, stops the servers shared by them, runs cleanups and exits.
// Call it from TestMain in every package that uses DatabaseURL.
func Main(m interface{ Run() int }, cleanups ...func()) {
	code := m.Run()
	pg.stop()
	if sqliteTemplate.file != "" {
		os.RemoveAll(filepath.Dir(sqliteTemplate.file))
	}
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}

// Postgres is a throw-away Postgres server in a temp dir on a free loopback port, run as the
// postgres user when the caller is root (initdb refuses root). Stop removes everything.
type Postgres struct {
	dir    string
	Port   int
	cmd    *exec.Cmd
	argv   []string // the postgres command line, for Resume
	attr   *syscall.SysProcAttr
	admin  *sql.DB
	serial atomic.Int64

	template    sync.Once
	templateErr error
	learned     sync.Once
	learnErr    error
	copying     sync.Mutex
	pool        dbPool

	// The worker nodes of a Citus cluster whose coordinator this is (StartCitus): every
	// database is made on each of them too.
	workers []*Postgres
	// The settings the cluster's nodes started with, for a node added later (AddWorker).
	nodeSettings []string

	// On a server shared by a suite's test binaries (SharedPostgresEnv), the file locked
	// around the template's copies; empty on a binary's own server. And the databases this
	// binary created, dropped when it ends on a shared one.
	lockPath string
	createdM sync.Mutex
	created  []string
}

// shared reports whether the server is shared by a suite's test binaries.
func (s *Postgres) shared() bool { return s.lockPath != "" }

// PID is the postmaster's process id: its children are the server's other processes.
func (s *Postgres) PID() int {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

type sharedPostgres struct {
	once sync.Once
	srv  *Postgres
	err  error
}

var pg sharedPostgres

func (s *sharedPostgres) stop() {
	if s.srv != nil {
		s.srv.release()
	}
}

// postgresDatabase creates a database on the package's server: a copy of a migrated template
// when migrated, else an empty one.
func postgresDatabase(t testing.TB, migrated bool) string {
	t.Helper()
	pg.once.Do(func() { pg.srv, pg.err = packageServer() })
	if pg.err != nil {
		t.Fatalf("postgres: %v", pg.err)
	}
	if migrated {
		if name, ok := pg.srv.pool.take(); ok {
			url := pg.srv.URL(name)
			t.Cleanup(func() { pg.srv.pool.give(name, url) })
			return url
		}
	}
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), pg.srv.serial.Add(1))
	pg.srv.createdM.Lock()
	pg.srv.created = append(pg.srv.created, name)
	pg.srv.createdM.Unlock()
	var (
		url string
		err error
	)
	if migrated {
		url, err = pg.srv.CreateMigratedDatabase(name)
	} else {
		url, err = pg.srv.CreateDatabase(name)
	}
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	if migrated { // registered first, so it runs after the test's own cleanups closed their connections
		t.Cleanup(func() { pg.srv.pool.give(name, url) })
	}
	return url
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

// StartPostgres starts a server on a freshly initialised data directory (a copy of one
// initialised once per machine) and waits until it accepts connections.
// Durability is off (fsync, synchronous_commit, full_page_writes) unless extraSettings
// ("name=value", applied last) turn it back on.
func StartPostgres(extraSettings ...string) (*Postgres, error) {
	return startPostgres(false, extraSettings...)
}

// startPostgres is StartPostgres; a detached server outlives the test binary that started it
// (a suite's shared server, SharedPostgresEnv).
func startPostgres(detached bool, extraSettings ...string) (*Postgres, error) {
	bin, err := PostgresBin()
	if err != nil {
		return nil, err
	}
	s := &Postgres{}
	if s.dir, err = os.MkdirTemp("", "eventq-pg-"); err != nil {
		return nil, err
	}
	attr, err := postgresAttr()
	if err != nil {
		return nil, err
	}
	if detached {
		// Its own process group keeps a Ctrl-C meant for the tests from it; it stays in their
		// session. In a session of its own (setsid) the kernel's autogroup scheduler caps the
		// server at half the CPU when the suite saturates both cores: new connections took up
		// to 0.9-1.5 s, against 0.4-0.5 s in the same session (two runs each).
		attr.Pdeathsig, attr.Setpgid = 0, true
	}
	if c := attr.Credential; c != nil {
		if err := os.Chown(s.dir, int(c.Uid), int(c.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(s.dir, "data")
	if err := freshDataDir(bin, data, attr); err != nil {
		s.Stop()
		return nil, err
	}
	s.Port = freePort()
	args := []string{"-D", data, "-p", strconv.Itoa(s.Port), "-k", s.dir, "-h", "127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=400",
		"-c", "autovacuum=off"}
	for _, kv := range extraSettings {
		args = append(args, "-c", kv)
	}
	s.argv, s.attr = append([]string{filepath.Join(bin, "postgres")}, args...), attr
	s.admin, _ = sql.Open("pgx", s.URL("postgres"))
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// start runs the server on its data directory and waits until it accepts connections.
func (s *Postgres) start() error {
	s.cmd = exec.Command(s.argv[0], s.argv[1:]...)
	s.cmd.SysProcAttr = s.attr
	// The server's log, for a test to show when the server refused something (LogTail).
	if f, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		s.cmd.Stderr = f
		defer f.Close()
	}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.admin.Ping() != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Halt stops the server as "pg_ctl stop -m immediate" does (SIGQUIT: every connection cut, no
// checkpoint; the next start recovers from the log) and waits until it is gone. Its data stay
// for Resume.
func (s *Postgres) Halt() {
	s.cmd.Process.Signal(syscall.SIGQUIT)
	s.cmd.Wait()
}

// Resume starts a halted server again on the same data and port, and waits until it accepts
// connections.
func (s *Postgres) Resume() error { return s.start() }

// postgresAttr is how initdb and postgres are run: as the postgres user when the caller is
// root (initdb refuses root), and killed with the test binary.
func postgresAttr() (*syscall.SysProcAttr, error) {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return attr, nil
}

// URL is the connection URL of database name.
func (s *Postgres) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, name)
}

// CreateDatabase creates an empty database and returns its URL.
func (s *Postgres) CreateDatabase(name string) (string, error) {
	if s.workers != nil {
		return s.createCitusDatabase(name)
	}
	if _, err := s.admin.Exec("CREATE DATABASE " + name); err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// templateName is the migrated database CreateMigratedDatabase copies.
const templateName = "eventq_template"

// CreateMigratedDatabase creates a database with every migration applied, as a copy of a
// template migrated once per server.
func (s *Postgres) CreateMigratedDatabase(name string) (string, error) {
	s.template.Do(func() { s.templateErr = s.exclusive(s.makeTemplate) })
	if s.templateErr != nil {
		return "", fmt.Errorf("migrate the template database: %w", s.templateErr)
	}
	if err := s.exclusive(func() error { return s.copyDatabase(templateName, name) }); err != nil {
		return "", err
	}
	url := s.URL(name)
	// The pool learns the template's shape from its first copy: nothing connects to the
	// template itself.
	s.learned.Do(func() { s.learnErr = s.pool.learn(url) })
	if s.learnErr != nil {
		return "", fmt.Errorf("learn the template's shape: %w", s.learnErr)
	}
	return url, nil
}

// makeTemplate migrates the template, unless another binary sharing the server did. The
// template is migrated under another name and renamed when complete, so a binary that died
// halfway leaves no template to copy. It then takes no connection (Citus's daemons would
// keep some open, and a database being read cannot be copied).
func (s *Postgres) makeTemplate() error {
	var exists bool
	if err := s.admin.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, templateName).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	const making = templateName + "_making"
	if err := s.dropDatabase(making); err != nil {
		return err
	}
	url, err := s.CreateDatabase(making)
	if err != nil {
		return err
	}
	if err := migrate(url); err != nil {
		return err
	}
	if err := s.onEveryNode(making, "ALTER DATABASE "+making+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	return s.renameDatabase(making, templateName)
}

// Stop shuts the server down (fast mode) and removes its directory; a coordinator's worker
// nodes stop too.
func (s *Postgres) Stop() {
	for _, w := range s.workers {
		w.Stop()
	}
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
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

// RefuseSession makes the database refuse any row whose session_id is session, the way a
// constraint or an encoding error would.
func RefuseSession(t testing.TB, db *gorm.DB, session string) {
	t.Helper()
	stmts := []string{fmt.Sprintf(`CREATE TRIGGER refuse BEFORE INSERT ON tracked_events
		WHEN NEW.session_id = '%s' BEGIN SELECT RAISE(ABORT, 'refused by test'); END`, session)}
	if OnPostgres() {
		stmts = []string{
			fmt.Sprintf(`CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN
				IF NEW.session_id = '%s' THEN RAISE EXCEPTION 'refused by test'; END IF;
				RETURN NEW; END $$ LANGUAGE plpgsql`, session),
			`CREATE TRIGGER refuse BEFORE INSERT ON tracked_events FOR EACH ROW EXECUTE FUNCTION refuse()`,
		}
	}
	for _, s := range stmts {
		if err := db.Exec(s).Error; err != nil {
			t.Fatal(err)
		}
	}
}
