package testenv

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// A used Postgres database goes back to the pool empty, with its ids starting over, only when
// nothing is connected to it any more and its schema is still the template's.
func TestPostgresDatabasesAreReusedOnlyWhenClean(t *testing.T) {
	s, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	use := func(name string, then func(db *sql.DB)) string {
		t.Helper()
		url, err := s.CreateMigratedDatabase(name)
		Must(t, err)
		db, err := sql.Open("pgx", url)
		Must(t, err)
		t.Cleanup(func() { db.Close() })
		_, err = db.Exec(`INSERT INTO tenants (name, site_key, created_at, updated_at) VALUES ('a', 'k1', now(), now()), ('b', 'k2', now(), now())`)
		Must(t, err)
		then(db)
		return url
	}

	url := use("clean", func(db *sql.DB) { db.Close() })
	s.pool.give("clean", url)
	name, ok := s.pool.take()
	if !ok || name != "clean" {
		t.Fatalf("a clean database was not taken back: %q, %v", name, ok)
	}
	db, err := sql.Open("pgx", url)
	Must(t, err)
	defer db.Close()
	var rows, id int
	Must(t, db.QueryRow(`SELECT count(*) FROM tenants`).Scan(&rows))
	Must(t, db.QueryRow(`INSERT INTO tenants (name, site_key, created_at, updated_at) VALUES ('c', 'k3', now(), now()) RETURNING id`).Scan(&id))
	if rows != 0 || id != 1 {
		t.Fatalf("reused database: %d rows left, next id %d; want 0 and 1", rows, id)
	}
	db.Close()

	for _, tc := range []struct {
		name string
		then func(db *sql.DB)
	}{
		{"still_connected", func(db *sql.DB) { Must(t, db.Ping()) }},
		{"schema_changed", func(db *sql.DB) {
			_, err := db.Exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
				CREATE TRIGGER refuse BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION refuse()`)
			Must(t, err)
			db.Close()
		}},
		{"table_dropped", func(db *sql.DB) {
			_, err := db.Exec(`DROP TABLE webhook_inbox`)
			Must(t, err)
			db.Close()
		}},
	} {
		url := use(tc.name, tc.then)
		s.pool.give(tc.name, url)
		if name, ok := s.pool.take(); ok {
			t.Errorf("%s: database %q was taken back", tc.name, name)
		}
	}
}

// Each SQLite test database is its own copy of the migrated template.
func TestSQLiteDatabasesAreSeparateCopies(t *testing.T) {
	t.Setenv("EVENTQ_TEST_DB", "sqlite")
	a, b := DatabaseURL(t), DatabaseURL(t)
	if a == b {
		t.Fatalf("one database for two callers: %s", a)
	}
	adb, _ := sql.Open("sqlite", strings.TrimPrefix(a, "sqlite://"))
	defer adb.Close()
	_, err := adb.Exec(`INSERT INTO tenants (name, site_key, created_at, updated_at) VALUES ('a', 'k', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)`)
	Must(t, err)
	bdb, _ := sql.Open("sqlite", strings.TrimPrefix(b, "sqlite://"))
	defer bdb.Close()
	var n int
	Must(t, bdb.QueryRow(`SELECT count(*) FROM tenants`).Scan(&n))
	if n != 0 {
		t.Fatalf("a row written to one copy shows in the other")
	}
	if _, err := os.Stat(sqliteTemplate.file); err != nil {
		t.Fatal(err)
	}
}

// fatalTB records a Fatal and ends the calling goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Fatal(args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fatalTB) Helper() {}

// Under EVENTQ_TEST_DB=none (make test's database-free packages) asking for a database fails
// the test, so a package that starts using one cannot stay on that list unnoticed.
func TestNoDatabaseMeansAskingForOneFails(t *testing.T) {
	t.Setenv("EVENTQ_TEST_DB", "none")
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); DatabaseURL(f) }()
	<-done
	if !strings.Contains(f.msg, "database-free") {
		t.Fatalf("DatabaseURL under EVENTQ_TEST_DB=none: Fatal %q, want the database-free message", f.msg)
	}
}

// Processes starting their first server at once each initialise a data directory, one of them
// is kept, and later servers get copies of that one without initialising again.
func TestDataDirectoriesAreInitialisedOnceAndCopied(t *testing.T) {
	// A temp dir of the test's own that the postgres user may enter (t.TempDir's may not be).
	tmp, err := os.MkdirTemp("", "eventq-initdb-test-")
	Must(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	Must(t, os.Chmod(tmp, 0o755))
	t.Setenv("TMPDIR", tmp)
	bin, err := PostgresBin()
	Must(t, err)
	attr, err := postgresAttr()
	Must(t, err)
	dst := filepath.Join(tmp, "servers")
	Must(t, os.Mkdir(dst, 0o700))
	if c := attr.Credential; c != nil {
		Must(t, os.Chown(dst, int(c.Uid), int(c.Gid)))
	}
	made := func(i int) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(dst, fmt.Sprint(i), "PG_VERSION")); err != nil {
			t.Errorf("server %d has no data directory: %v", i, err)
		}
	}
	kept := func() string {
		t.Helper()
		des, err := os.ReadDir(tmp)
		Must(t, err)
		var names []string
		for _, de := range des {
			if strings.HasPrefix(de.Name(), "eventq-pg-initdb-") {
				names = append(names, de.Name())
			}
		}
		if len(names) != 1 {
			t.Fatalf("initialised directories kept: %q, want exactly one", names)
		}
		return filepath.Join(tmp, names[0], "data")
	}

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = freshDataDir(bin, filepath.Join(dst, fmt.Sprint(i)), attr)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		Must(t, err)
		made(i)
	}
	// A file only the kept directory has: a later server's copy of it has it too.
	marker := filepath.Join(kept(), "eventq-test-marker")
	Must(t, os.WriteFile(marker, nil, 0o600))
	if c := attr.Credential; c != nil {
		Must(t, os.Chown(marker, int(c.Uid), int(c.Gid)))
	}

	runs := initdbRuns.Load()
	Must(t, freshDataDir(bin, filepath.Join(dst, "2"), attr))
	made(2)
	kept()
	if n := initdbRuns.Load() - runs; n != 0 {
		t.Errorf("a later server ran initdb %d times, want 0: it should copy the kept directory", n)
	}
	if _, err := os.Stat(filepath.Join(dst, "2", "eventq-test-marker")); err != nil {
		t.Errorf("a later server's data directory is not a copy of the kept one: %v", err)
	}
}
