package database

import (
	"context"
	"database/sql/driver"
	"fmt"
	"os"
	"time"

	"gorm.io/gorm"
)

// migrationLockKey is the Postgres advisory lock that migrations of one database take turns on
// (any number: it only has to differ from other advisory locks taken in the same database,
// and eventq takes no other).
const migrationLockKey = 0x6576656e7471 // "eventq"

// lockRetry is how often a migration waiting for another's lock on Postgres tries again.
const lockRetry = 100 * time.Millisecond

// lockMigrations makes concurrent migrations of db take turns: a second `eventq migrate`
// started while one runs (a Job retried beside the first, an operator during a rollout) waits
// for it, then finds every migration applied. Without it both would see a migration not yet
// recorded and both apply it, and the later one fail half-way (a table that already exists,
// the migration's id recorded twice). The returned func releases the lock.
//
// On Postgres the lock is a session advisory lock, held on a connection of its own (which runs
// no transaction, so that CREATE INDEX CONCURRENTLY does not wait for it). A migration waiting
// for it tries again every lockRetry rather than block in pg_advisory_lock: a blocked
// statement holds a snapshot, which the running migration's CREATE INDEX CONCURRENTLY would
// wait for while the blocked one waits for it (they did, in the test of four migrations).
//
// On SQLite it is an exclusive lock on a file beside the database (PATH-migrate.lock, left in
// place: removing it would race with the next migration's open), not on the database file
// itself, whose closing would drop the locks SQLite holds on it in this process. An
// in-memory SQLite database has one process: nothing to lock.
func lockMigrations(ctx context.Context, db *gorm.DB) (unlock func(), err error) {
	if IsPostgres(db) {
		return advisoryLock(ctx, db)
	}
	var path string
	if err := db.WithContext(ctx).Raw("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path).Error; err != nil {
		return nil, fmt.Errorf("database: migration lock: %w", err)
	}
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path+"-migrate.lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("database: migration lock: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("database: migration lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing the file releases its lock
}

// advisoryLock takes Postgres's session advisory lock migrationLockKey on a connection taken
// from db's pool for the purpose, trying every lockRetry until it is free, and returns the
// func that releases both.
func advisoryLock(ctx context.Context, db *gorm.DB) (func(), error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("database: migration lock: %w", err)
	}
	for {
		var locked bool
		err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", int64(migrationLockKey)).Scan(&locked)
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("database: migration lock: %w", err)
		}
		if locked {
			break
		}
		select {
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("database: migration lock: %w", ctx.Err())
		case <-time.After(lockRetry):
		}
	}
	return func() {
		// An unlock that fails leaves the lock to the session's end: the connection is
		// closed rather than returned to the pool with the lock still held.
		if _, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey)); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // discards the connection
		}
		conn.Close()
	}, nil
}
