package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
)

// sqliteFileMiB is the size of the SQLite database file with its WAL, in MiB.
func sqliteFileMiB(url string) float64 {
	path := strings.TrimPrefix(url, "sqlite://")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	total := int64(0)
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			total += fi.Size()
		}
	}
	return float64(total) / (1 << 20)
}

// fillDay stores n events of tenantID created over the UTC day that starts at day, into the
// database the services run on: COPY into its partition (created first) on Postgres, 50-row
// inserts in transactions of 10,000 rows on SQLite.
func fillDay(ctx context.Context, s *stack, tenantID uint64, n int, day time.Time) error {
	return fillEvents(ctx, s.dbURL, s.db, tenantID, n, day, day.AddDate(0, 0, 1))
}

// fillEvents stores n events of tenantID with created_at spread evenly over [from, to).
func fillEvents(ctx context.Context, url string, db *gorm.DB, tenantID uint64, n int, from, to time.Time) error {
	if strings.HasPrefix(url, "postgres") {
		if _, err := database.EnsurePartitions(ctx, db, from, to.Add(-time.Nanosecond)); err != nil {
			return err
		}
		return copyEvents(ctx, url, "tracked_events", tenantID, n, from, to)
	}
	return sqliteFill(ctx, url, tenantID, n, from, to)
}

// eventAt returns the values of event i as rowValues does, created at at, with a UUID v7 of
// that time.
func eventAt(args []any, tenantID uint64, i int, at time.Time) []any {
	args = rowValues(args, tenantID, i%1_000_000, at)
	u := uuid.Must(uuid.NewV7())
	ms := uint64(at.UnixMilli())
	for b := range 6 {
		u[b] = byte(ms >> (40 - 8*b))
	}
	args[len(args)-13] = u.String()
	return args
}

// copyEvents COPYs n events into table on Postgres.
func copyEvents(ctx context.Context, url, table string, tenantID uint64, n int, from, to time.Time) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	cols := strings.Split(trackedColumns, ", ")
	step := to.Sub(from) / time.Duration(n)
	i := 0
	_, err = c.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		row := eventAt(make([]any, 0, 13), tenantID, i, from.Add(time.Duration(i)*step))
		i++
		return row, nil
	}))
	if err != nil {
		return fmt.Errorf("copy %d events into %s: %w", n, table, err)
	}
	return nil
}

// sqliteFill inserts n events (rounded up to 50) on SQLite, in 50-row inserts, 10,000 rows a
// transaction.
func sqliteFill(ctx context.Context, url string, tenantID uint64, n int, from, to time.Time) error {
	gdb, err := database.Open(url)
	if err != nil {
		return err
	}
	defer database.Close(gdb)
	db, err := gdb.DB()
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	const batch, perTx = 50, 10_000
	step := to.Sub(from) / time.Duration(n)
	q := insertSQL(batch, false)
	args := make([]any, 0, 13*batch)
	for done := 0; done < n; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, q)
		if err != nil {
			tx.Rollback()
			return err
		}
		for k := 0; k < perTx && done < n; k += batch {
			args = args[:0]
			for r := range batch {
				args = eventAt(args, tenantID, done+r, from.Add(time.Duration(min(done+r, n-1))*step))
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				tx.Rollback()
				return fmt.Errorf("sqlite fill: %w", err)
			}
			done += batch
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
