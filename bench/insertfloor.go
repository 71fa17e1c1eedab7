package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/eventq/eventq/internal/database"
)

// InsertFloor is the database's own insert throughput for the rows the api writes, measured
// in the same run on the same table: multi-row INSERTs on Conns connections.
type InsertFloor struct {
	Database string  `json:"database"`
	Client   string  `json:"client"`
	Conns    int     `json:"connections"`
	Rows100  float64 `json:"rows_per_second_100_row_inserts"`
	Rows50   float64 `json:"rows_per_second_50_row_inserts"`
	Rows1    float64 `json:"rows_per_second_1_row_inserts"`
}

// best is the floor the ratios use: the faster of the multi-row insert sizes (100 rows on
// Postgres; on SQLite 50 can win, its driver binding parameters in quadratic time).
func (f *InsertFloor) best() float64 { return max(f.Rows100, f.Rows50) }

// trackedColumns are the columns of tracked_events, in the order rowValues gives them.
const trackedColumns = "id, tenant_id, type, session_id, audience_member_id, url, page_hostname, page_path, user_agent, ip_address, event_sequence, queue_pending, created_at"

// rowValues appends the values of the row the api stores for event i of tenantID, except that
// queue_pending is false: the worker's requeue job would otherwise push every floor row to
// Redis (under SQLite's write lock) while the api is being measured.
func rowValues(args []any, tenantID uint64, i int, now time.Time) []any {
	in := inputOf(i)
	return append(args, uuid.Must(uuid.NewV7()).String(), int64(tenantID), in.Type, in.Session, in.Member,
		in.URL, "shop.example", fmt.Sprintf("/products/%d", in.product), userAgent, ingestIP, in.Sequence, false, now)
}

// insertSQL is a multi-row INSERT of rows rows; dollar selects $n placeholders (Postgres).
func insertSQL(rows int, dollar bool) string {
	var b strings.Builder
	b.WriteString("INSERT INTO tracked_events (" + trackedColumns + ") VALUES ")
	n := 0
	for r := range rows {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range 13 {
			if c > 0 {
				b.WriteByte(',')
			}
			n++
			if dollar {
				b.WriteString("$" + strconv.Itoa(n))
			} else {
				b.WriteByte('?')
			}
		}
		b.WriteByte(')')
	}
	return b.String()
}

// postgresFloor measures pgx multi-row inserts of batch rows on conns connections for d.
func postgresFloor(ctx context.Context, url string, tenantID uint64, batch, conns int, d time.Duration) (float64, error) {
	return postgresInsertRate(ctx, url, "tracked_events", tenantID, batch, conns, d)
}

// postgresInsertRate measures pgx multi-row inserts of batch rows into table (tracked_events
// or a table of its columns) on conns connections for d.
func postgresInsertRate(ctx context.Context, url, table string, tenantID uint64, batch, conns int, d time.Duration) (float64, error) {
	q := strings.Replace(insertSQL(batch, true), "INSERT INTO tracked_events ", "INSERT INTO "+table+" ", 1)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		first error
	)
	cs := make([]*pgx.Conn, conns)
	for i := range cs {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return 0, err
		}
		defer c.Close(context.Background())
		cs[i] = c
	}
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := make([]any, 0, 13*batch)
			n := 0
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				args = args[:0]
				now := time.Now().UTC()
				for r := range batch {
					args = rowValues(args, tenantID, (i*batch+r)%1_000_000, now)
				}
				if _, err := c.Exec(ctx, q, args...); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				n += batch
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, fmt.Errorf("postgres insert floor: %w", first)
	}
	return float64(total) / time.Since(start).Seconds(), ctx.Err()
}

// sqliteFloor measures multi-row inserts of batch rows through database/sql with the
// service's own driver and pragmas, on one connection, for d.
func sqliteFloor(ctx context.Context, db *sql.DB, tenantID uint64, batch int, d time.Duration) (float64, error) {
	stmt, err := db.PrepareContext(ctx, insertSQL(batch, false))
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	args := make([]any, 0, 13*batch)
	start := time.Now()
	total := 0
	for i := 0; time.Since(start) < d && ctx.Err() == nil; i++ {
		args = args[:0]
		now := time.Now().UTC()
		for r := range batch {
			args = rowValues(args, tenantID, (i*batch+r)%1_000_000, now)
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return 0, fmt.Errorf("sqlite insert floor: %w", err)
		}
		total += batch
	}
	return float64(total) / time.Since(start).Seconds(), ctx.Err()
}

// measureInsertFloor measures the floor of the database the services run on, for tenantID's
// rows: 100-, 50- and 1-row inserts, each for d.
func measureInsertFloor(ctx context.Context, s *stack, tenantID uint64, d time.Duration) (*InsertFloor, error) {
	f := &InsertFloor{}
	var err error
	if strings.HasPrefix(s.dbURL, "postgres") {
		f.Database, f.Client, f.Conns = "postgres", "pgx multi-row INSERT", 8
		for _, m := range []struct {
			batch int
			dst   *float64
		}{{100, &f.Rows100}, {50, &f.Rows50}, {1, &f.Rows1}} {
			if *m.dst, err = postgresFloor(ctx, s.dbURL, tenantID, m.batch, f.Conns, d); err != nil {
				return nil, err
			}
		}
		return f, nil
	}
	f.Database, f.Client, f.Conns = "sqlite", "database/sql multi-row INSERT (modernc.org/sqlite, the service's pragmas)", 1
	gdb, err := database.Open(s.dbURL)
	if err != nil {
		return nil, err
	}
	defer database.Close(gdb)
	db, err := gdb.DB()
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	for _, m := range []struct {
		batch int
		dst   *float64
	}{{100, &f.Rows100}, {50, &f.Rows50}, {1, &f.Rows1}} {
		if *m.dst, err = sqliteFloor(ctx, db, tenantID, m.batch, d); err != nil {
			return nil, err
		}
	}
	return f, nil
}
