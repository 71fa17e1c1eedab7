// Package database opens eventq's database from DATABASE_URL and migrates it.
package database

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Open connects to sqlite://PATH or postgres://… . For SQLite the parent directory is created,
// WAL mode is on and writers wait for each other instead of failing with SQLITE_BUSY.
func Open(databaseURL string) (*gorm.DB, error) {
	cfg := &gorm.Config{
		Logger:                 logger.Default.LogMode(logger.Silent),
		NowFunc:                func() time.Time { return time.Now().UTC() },
		SkipDefaultTransaction: true,
		TranslateError:         true,
	}
	var (
		db  *gorm.DB
		err error
	)
	path, isSQLite := strings.CutPrefix(databaseURL, "sqlite://")
	if isSQLite {
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("database: create %s: %w", dir, err)
			}
		}
		dsn := path + "?_pragma=busy_timeout(10000)"
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			// A new database gives deleted rows' pages back to the file system on request
			// (retention). The setting must precede the first table, and so journal_mode;
			// older databases are switched by a migration.
			dsn += "&_pragma=auto_vacuum(incremental)"
		}
		dsn += "&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"
		dsn += fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", walBacklogPages)
		// Times are stored as text that sorts as it compares ("2006-01-02 15:04:05.999999999-07:00"),
		// the layout of every earlier version: retention and export compare them as text.
		dsn += "&_time_format=sqlite"
		db, err = gorm.Open(sqlite.Open(dsn), cfg)
	} else {
		db, err = gorm.Open(postgres.Open(withConnectTimeout(databaseURL)), cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("database: open: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	sqlDB.SetMaxOpenConns(20)
	sqlDB.SetMaxIdleConns(20)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	if isSQLite {
		startCheckpoints(sqlDB, path, checkpointInterval, idleCheckpointInterval)
	}
	return db, nil
}

// IsPostgres reports whether db talks to Postgres.
func IsPostgres(db *gorm.DB) bool { return db.Dialector.Name() == "postgres" }

// Close closes db's connection pool.
func Close(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	stopCheckpoints(sqlDB)
	return sqlDB.Close()
}

// connectTimeout bounds a new Postgres connection's set-up when the URL does not say: a server
// that does not answer fails requests in seconds (503), not after the system's TCP timeout.
const connectTimeout = "2"

// withConnectTimeout adds connect_timeout to a Postgres URL or key=value DSN without one.
func withConnectTimeout(dsn string) string {
	if strings.Contains(dsn, "connect_timeout") {
		return dsn
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "connect_timeout=" + connectTimeout
	}
	return dsn + " connect_timeout=" + connectTimeout
}
