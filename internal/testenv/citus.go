package testenv

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
)

// CitusWorkers is how many worker nodes the Citus suite's cluster has.
const CitusWorkers = 2

// citusSettings are the servers' settings for Citus: the extension, a background worker per
// database's maintenance daemon on every node (each test has its database), and few shards,
// which keep a test database's copy small; 32 per table is the production default.
var citusSettings = []string{
	"shared_preload_libraries=citus", "max_worker_processes=256", "citus.shard_count=4",
	// The coordinator routes one tenant's statements to a worker node over a connection of its
	// own; many test databases at once need many.
	"citus.max_shared_pool_size=-1",
	// The nodes talk to each other without TLS, as the servers have none (and libpq would
	// look for client certificates in the home of the user that started the tests).
	"citus.node_conninfo=sslmode=disable",
	// Tests make the database refuse a row with a trigger (RefuseSession).
	"citus.enable_unsafe_triggers=on",
	// A rebalance moves shards by logical replication, with writes going on.
	"wal_level=logical",
}

// StartCitus starts a Citus cluster of throw-away servers: a coordinator, the returned
// Postgres, and CitusWorkers worker nodes. Databases made on it (CreateDatabase,
// CreateMigratedDatabase) have the extension on every node and the workers registered. It
// needs Citus installed into the system's Postgres (scripts/ensure-deps.sh citus).
// extraSettings apply to every node, as StartPostgres's (durability is off without them).
func StartCitus(extraSettings ...string) (*Postgres, error) {
	return startCitus(false, extraSettings...)
}

func startCitus(detached bool, extraSettings ...string) (*Postgres, error) {
	settings := append(slices.Clip(citusSettings), extraSettings...)
	s, err := startPostgres(detached, settings...)
	if err == nil {
		s.nodeSettings = settings
	}
	if err != nil {
		return nil, fmt.Errorf("citus coordinator: %w (is Citus installed? scripts/ensure-deps.sh citus)", err)
	}
	s.workers = []*Postgres{}
	for range CitusWorkers {
		w, err := startPostgres(detached, settings...)
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("citus worker: %w", err)
		}
		s.workers = append(s.workers, w)
	}
	return s, nil
}

// Worker is the cluster's i-th worker node (from 0), to stop and resume (Halt, Resume).
func (s *Postgres) Worker(i int) *Postgres { return s.workers[i] }

// nodes are the servers of the cluster s coordinates (s first), or s alone.
func (s *Postgres) nodes() []*Postgres { return append([]*Postgres{s}, s.workers...) }

// AddWorker starts one more worker node and registers it with databases (Citus keeps its
// nodes per database); its shards come only with a rebalance (SELECT
// citus_rebalance_start()). The node is the caller's to stop; databases must not go back to
// the pool (IsolatedCitusDatabase).
func (s *Postgres) AddWorker(databases ...string) (*Postgres, error) {
	settings := s.nodeSettings
	if settings == nil { // a cluster another test binary started
		settings = citusSettings
	}
	w, err := startPostgres(false, settings...)
	if err != nil {
		return nil, err
	}
	for _, name := range databases {
		if _, err := w.admin.Exec("CREATE DATABASE " + name); err != nil {
			w.Stop()
			return nil, err
		}
		if err := execOn(w.URL(name), "CREATE EXTENSION citus"); err != nil {
			w.Stop()
			return nil, err
		}
		if err := execOn(s.URL(name), fmt.Sprintf("SELECT citus_add_node('127.0.0.1', %d)", w.Port)); err != nil {
			err = fmt.Errorf("%w\nthe new node's log:\n%s\nthe coordinator's:\n%s", err, w.LogTail(), s.LogTail())
			w.Stop()
			return nil, err
		}
	}
	return w, nil
}

// IsolatedCitusDatabase is a fresh, migrated database on the Citus suite's cluster, as
// DatabaseURL's, but one that no later test gets: a test may add nodes to it (AddWorker). It
// returns the cluster, the database's name and its URL (guarded, as DatabaseURL's).
func IsolatedCitusDatabase(t testing.TB) (cluster *Postgres, name, url string) {
	t.Helper()
	if Backend() != "citus" {
		t.Fatal("IsolatedCitusDatabase: the suite does not run on Citus")
	}
	pg.once.Do(func() { pg.srv, pg.err = packageServer() })
	if pg.err != nil {
		t.Fatalf("citus: %v", pg.err)
	}
	name = fmt.Sprintf("t_%d_%d", os.Getpid(), pg.srv.serial.Add(1))
	pg.srv.createdM.Lock()
	pg.srv.created = append(pg.srv.created, name)
	pg.srv.createdM.Unlock()
	url, err := pg.srv.CreateMigratedDatabase(name)
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	return pg.srv, name, url
}

// createCitusDatabase makes database name on every node of the cluster, with the extension,
// and registers the workers with the coordinator's.
func (s *Postgres) createCitusDatabase(name string) (string, error) {
	for _, n := range s.nodes() {
		if _, err := n.admin.Exec("CREATE DATABASE " + name); err != nil {
			return "", err
		}
		if err := execOn(n.URL(name), "CREATE EXTENSION citus"); err != nil {
			return "", err
		}
	}
	stmts := []string{fmt.Sprintf("SELECT citus_set_coordinator_host('127.0.0.1', %d)", s.Port)}
	for _, w := range s.workers {
		stmts = append(stmts, fmt.Sprintf("SELECT citus_add_node('127.0.0.1', %d)", w.Port))
	}
	if err := execOn(s.URL(name), stmts...); err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// copyDatabase makes database dst a copy of src, on every node of a cluster: a copy of
// every node's database is a copy of the distributed one, its shards and their placements.
// On Citus, dst's sessions refuse a statement that touches the shards of several tenants
// (RoutedOnly).
func (s *Postgres) copyDatabase(src, dst string) error {
	if err := s.onEveryNode(src, "CREATE DATABASE "+dst+" TEMPLATE "+src); err != nil {
		return err
	}
	if s.workers == nil {
		return nil
	}
	// Citus records the database itself among its distributed objects, by oid: the copy's
	// record names the template until it is pointed at the copy (a node added later would be
	// given the template's name).
	for _, n := range s.nodes() {
		if err := execOn(n.URL(dst), `UPDATE pg_catalog.pg_dist_object SET objid = (SELECT oid FROM pg_database WHERE datname = current_database())
			WHERE classid = 'pg_database'::regclass`); err != nil {
			return err
		}
	}
	_, err := s.admin.Exec("ALTER DATABASE " + dst + " SET " + RoutedOnly)
	return err
}

// RoutedOnly is Citus's guard that fails a statement run as tasks on several shards, with
// which the Citus suite runs: work for one tenant must be routed to the one node that holds
// it, and work over all tenants says so (database.AcrossTenants). A test's own statement
// that counts the rows of every tenant runs in testenv.AcrossTenants.
const RoutedOnly = "citus.multi_task_query_log_level = 'error'"

// renameDatabase renames database from to to, on every node of a cluster.
func (s *Postgres) renameDatabase(from, to string) error {
	return s.onEveryNode(from, "ALTER DATABASE "+from+" RENAME TO "+to)
}

// dropDatabase drops database name if it exists, on every node of a cluster.
func (s *Postgres) dropDatabase(name string) error {
	for _, n := range s.nodes() {
		if _, err := n.admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			return err
		}
	}
	return nil
}

// onEveryNode runs stmt, which needs database name to itself (a copy or a rename of it), on
// every node. On Citus, each node keeps connections to a database with the extension (its
// maintenance daemon, and those of the other nodes' daemons); they are ended first, and stmt
// is tried again while one comes back before it.
func (s *Postgres) onEveryNode(name, stmt string) error {
	for _, n := range s.nodes() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if s.workers != nil {
				for _, m := range s.nodes() {
					m.admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
				}
			}
			_, err := n.admin.Exec(stmt)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "being accessed by other users") || time.Now().After(deadline) {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// execOn runs stmts on the database at url, on a connection of their own.
func execOn(url string, stmts ...string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// StatActivity is the view of db's sessions in which a test finds one waiting for a lock:
// pg_stat_activity, or on Citus citus_stat_activity, which adds the worker nodes' sessions
// (where a tenant's statements wait, on shards named after their tables: tracked_events_102008).
func StatActivity(t testing.TB, db *gorm.DB) string {
	t.Helper()
	citus, err := database.IsCitus(db)
	Must(t, err)
	if citus {
		return "citus_stat_activity"
	}
	return "pg_stat_activity"
}

// Unguarded is url with Citus's guard off (RoutedOnly): for a test's own checks, which read
// every tenant's rows. Other URLs are returned as they are.
func Unguarded(url string) string {
	if Backend() != "citus" {
		return url
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "options=-c%20citus.multi_task_query_log_level%3Doff"
}

// LogTail is the end of the server's log.
func (s *Postgres) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(b[max(0, len(b)-3000):])
}
