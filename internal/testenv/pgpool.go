package testenv

import (
	"database/sql"
	"strings"
	"sync"
	"time"
)

// dbPool keeps the migrated databases of finished tests for the next ones: emptying a database
// and rewinding its sequences costs a fraction of copying the template again, and Postgres
// suites create one per test. A database is only taken back when nothing else is connected to
// it and its schema is still the template's (tests may add a trigger or drop a table); anything
// else leaves it unused.
type dbPool struct {
	mu    sync.Mutex
	free  []string
	shape string // the template's fingerprint
	reset string // the statements that empty a database and rewind its sequences
}

// learn records the template's shape: call it once, on the freshly migrated template.
func (p *dbPool) learn(url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	if p.shape, err = fingerprint(db); err != nil {
		return err
	}
	// DELETE, not TRUNCATE: the tables hold a few rows, and TRUNCATE makes new files for every
	// table and index. Foreign keys are not checked meanwhile (session_replication_role).
	stmts := []string{"SET session_replication_role = replica", "SET citus.multi_task_query_log_level = 'off'"}
	tables, err := names(db, `SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'migrations' ORDER BY 1`)
	if err != nil {
		return err
	}
	for _, t := range tables {
		stmts = append(stmts, "DELETE FROM "+t)
	}
	seqs, err := names(db, `SELECT quote_literal(quote_ident(sequencename)) FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1`)
	if err != nil {
		return err
	}
	for _, q := range seqs {
		stmts = append(stmts, "SELECT setval("+q+", 1, false)")
	}
	p.reset = strings.Join(append(stmts, "SET session_replication_role = DEFAULT"), "; ")
	return nil
}

// names runs a query of one text column and returns its values.
func names(db *sql.DB, query string) ([]string, error) {
	rows, err := db.Query(query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// take returns a free database's name, if there is one.
func (p *dbPool) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return "", false
	}
	name := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return name, true
}

// give empties the database at url and keeps name for a later test, unless it cannot be
// proven clean.
func (p *dbPool) give(name, url string) {
	if p.shape == "" {
		return
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if !alone(db) {
		return
	}
	if shape, err := fingerprint(db); err != nil || shape != p.shape {
		return
	}
	if _, err := db.Exec(`SET lock_timeout = '1s'; ` + p.reset); err != nil {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, name)
	p.mu.Unlock()
}

// alone reports whether db's connection is the only one to its database. A client that closed
// its connections a moment ago may still be listed while its server processes exit, so a busy
// database is asked again for a short while before it counts as still in use.
func alone(db *sql.DB) bool {
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		var others int
		// Citus's own connections (its maintenance daemon's, the other nodes') are not a test's.
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
			AND backend_type = 'client backend' AND application_name NOT LIKE 'citus_internal%'`).Scan(&others)
		if err != nil {
			return false
		}
		if others == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fingerprint sums up a database's schema: its tables with their columns, and the triggers,
// functions and sequences in it.
func fingerprint(db *sql.DB) (string, error) {
	var s string
	err := db.QueryRow(`SELECT concat_ws(' / ',
		(SELECT string_agg(table_name || '.' || column_name || ':' || data_type, ',' ORDER BY table_name, column_name)
			FROM information_schema.columns WHERE table_schema = 'public'),
		(SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal),
		(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'),
		(SELECT count(*) FROM pg_class WHERE relkind = 'S'),
		(SELECT count(*) FROM pg_indexes WHERE schemaname = 'public'))`).Scan(&s)
	return s, err
}
