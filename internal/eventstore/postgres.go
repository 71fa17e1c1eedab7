package eventstore

import (
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// trackedEventColumns are the columns both writers fill, in the order of appendCopyRow
// (postgres.insert) and appendValues (sqliteWriter).
var trackedEventColumns = []string{"id", "tenant_id", "type", "session_id", "audience_member_id", "url",
	"page_hostname", "page_path", "user_agent", "ip_address", "event_sequence", "queued", "queue_pending", "created_at"}

// postgres is the dialect of Postgres: writes do not exclude each other, rows are locked in
// transactions, and tracked_events is partitioned by day (internal/database).
type postgres struct{}

func (postgres) write(fn func() error) error { return fn() }
func (postgres) close()                      {}

// writers is two: one batch's commit overlaps the next one's. More is not better: a commit is
// one round trip, and with more committers each batch held fewer requests, whose commit, append
// and settle then cost each of them alone (docs/performance-log.md).
func (postgres) writers() int { return 2 }

func (postgres) markChunk() int { return 2000 }

func (postgres) writableCTE() bool { return true }

func (postgres) locking(db *gorm.DB, fn func(*gorm.DB) error) error { return db.Transaction(fn) }

// idIn passes the ids as one array parameter (id = ANY($1)), not one parameter each: the
// statement is prepared once and cached, and Postgres keeps a generic plan after five runs.
// For id IN ($1, …, $n) that plan scans the whole time range and compares every row with
// every id, many times slower than ANY($1), whose plan probes the primary key.
func (postgres) idIn(q *gorm.DB, ids []string) *gorm.DB {
	return q.Where("id = ANY(?)", textArray(ids))
}

func (postgres) lock(q *gorm.DB, options string) *gorm.DB {
	return q.Clauses(clause.Locking{Strength: "UPDATE", Options: options})
}

func (postgres) pendingFrom() string { return "tracked_events" }

// serial runs fn on one core: Postgres would otherwise gather a long read with parallel
// workers, taking both of a small machine's cores from ingestion while it runs.
func (postgres) serial(db *gorm.DB, fn func(*gorm.DB) error) error {
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SET LOCAL max_parallel_workers_per_gather = 0").Error; err != nil {
			return err
		}
		return fn(tx)
	})
}

// analyze analyzes the day partitions of the events whose statistics autovacuum would renew
// now: rows changed since their last analysis (or since they were made) exceed a tenth of the
// rows it counted. Autovacuum may not have come round to them yet (they were just loaded or
// restored), or be off. Without fitting statistics the planner takes such a partition for a
// few hundred rows and reads every page of a range by sorting all the tenant's rows left in
// it, so an export grows with the square of its events (docs/performance-log.md). It is best
// effort: a failure leaves the read as it would have been.
func (postgres) analyze(ctx context.Context, db *gorm.DB) {
	var parts []string
	err := db.WithContext(ctx).Raw(`SELECT c.oid::regclass::text FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_stat_user_tables st ON st.relid = c.oid
		WHERE i.inhparent = ?::regclass AND st.n_mod_since_analyze >= ?
		AND st.n_mod_since_analyze > 0.1 * greatest(c.reltuples, 0)`, database.EventsTable, analyzeAbove).Scan(&parts).Error
	if err != nil {
		return
	}
	for _, p := range parts {
		if db.WithContext(ctx).Exec("ANALYZE "+p).Error != nil {
			return
		}
	}
}

// analyzeAbove is the fewest rows changed in a partition for a read to analyze it first:
// below it any plan reads the partition quickly.
const analyzeAbove = 10000

// insert writes rows to Postgres with one COPY, without the parsing and per-parameter
// work of a multi-row INSERT, and their pending batches with one INSERT, in one transaction.
// The rows go in COPY's binary format, encoded here (appendCopyRow): pgx's own CopyFrom boxes
// every value and encodes it through its type map, a large share of the api's CPU at many
// events a request.
//
// The INSERT and the COPY go as one query string, in one round trip: Postgres runs the
// statements of one simple query as one implicit transaction, so the batches and the rows
// commit together or not at all, and a failed statement leaves the connection idle, with
// nothing to roll back. With one event a request a commit carries a few rows, and the
// BEGIN, the INSERT and the COMMIT as round trips of their own cost the api and Postgres more
// than the COPY did.
func (postgres) insert(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent, pending []models.PendingBatch) error {
	buf := encodeCopy(rows)
	query := copySQL
	if len(pending) > 0 {
		query = pendingBatchInsert(pending) + "; " + copySQL
	}
	// The connection is taken once the rows are encoded, not held while they are.
	return withPgConn(ctx, db, func(pg *pgconn.PgConn) error {
		_, err := pg.CopyFrom(ctx, bytes.NewReader(buf), query)
		return err
	})
}

// encodeCopy is rows as a binary COPY's data: header, rows, trailer.
func encodeCopy(rows []models.TrackedEvent) []byte {
	buf := append(make([]byte, 0, 64+len(rows)*512), copyHeader...)
	for i := range rows {
		buf = appendCopyRow(buf, &rows[i])
	}
	return binary.BigEndian.AppendUint16(buf, 0xffff) // the trailer: a field count of -1
}

// withPgConn runs f on a connection of db's pool, as pgx's own connection.
func withPgConn(ctx context.Context, db *gorm.DB, f func(*pgconn.PgConn) error) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("eventstore: driver connection is %T, not pgx", driverConn)
		}
		return f(c.Conn().PgConn())
	})
}

// insertPendingBatches begins an INSERT of models.PendingBatch rows; their values follow.
const insertPendingBatches = "INSERT INTO pending_batches (id, tenant_id, event_ids, first_at, last_at, created_at) VALUES "

// pendingBatchInsert is the INSERT of pending batches with their values written in it as
// literals (a simple query has no parameters). Every value is the committer's own: ids it
// generated, a tenant's number, timestamps; quoteLiteral quotes them all the same.
func pendingBatchInsert(pending []models.PendingBatch) string {
	size := len(insertPendingBatches)
	for _, b := range pending {
		size += len(b.EventIDs) + 200 // its id, tenant, times, quotes and separators take under 200
	}
	q := append(make([]byte, 0, size), insertPendingBatches...)
	for i, b := range pending {
		if i > 0 {
			q = append(q, ", "...)
		}
		q = append(q, '(')
		q = quoteLiteral(q, b.ID)
		q = append(q, ", "...)
		q = strconv.AppendUint(q, b.TenantID, 10)
		for _, v := range []string{b.EventIDs, pgTime(b.FirstAt), pgTime(b.LastAt), pgTime(b.CreatedAt)} {
			q = quoteLiteral(append(q, ", "...), v)
		}
		q = append(q, ')')
	}
	return string(q)
}

// quoteLiteral appends s to q as a Postgres string literal: in single quotes, each single
// quote doubled. The values it quotes hold no backslash, which would need
// standard_conforming_strings (on by default since Postgres 9.1) to stay as it is.
func quoteLiteral(q []byte, s string) []byte {
	q = append(q, '\'')
	for {
		i := strings.IndexByte(s, '\'')
		if i < 0 {
			break
		}
		q = append(append(q, s[:i+1]...), '\'') // up to the quote, and the quote again
		s = s[i+1:]
	}
	return append(append(q, s...), '\'')
}

// pgTime is t in Postgres's text form of timestamptz.
func pgTime(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.999999Z07:00")
}

// copySQL is the COPY of trackedEventColumns in the binary format.
var copySQL = `COPY tracked_events ("` + strings.Join(trackedEventColumns, `", "`) + `") FROM STDIN BINARY`

// copyHeader opens a binary COPY: the signature, no flags, no header extension.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// pgEpochMicros is 2000-01-01 UTC, Postgres's timestamp origin, in microseconds since 1970.
const pgEpochMicros = 946684800 * 1_000_000

// appendCopyRow appends e as one row of a binary COPY, its fields in the order of
// trackedEventColumns, each its length then its bytes in the column type's binary form: text
// as it is, bigint as 8 bytes big-endian, boolean as 1 byte, timestamptz as microseconds since
// 2000-01-01 (truncated, as Postgres stores it); a missing audience member is NULL (-1).
func appendCopyRow(b []byte, e *models.TrackedEvent) []byte {
	text := func(b []byte, s string) []byte {
		return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
	}
	int8 := func(b []byte, v int64) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(b, 8), uint64(v))
	}
	boolean := func(b []byte, v bool) []byte {
		b = binary.BigEndian.AppendUint32(b, 1)
		if v {
			return append(b, 1)
		}
		return append(b, 0)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(trackedEventColumns)))
	b = text(b, e.ID)
	b = int8(b, int64(e.TenantID))
	b = text(b, e.Type)
	b = text(b, e.SessionID)
	if e.AudienceMemberID != nil {
		b = text(b, *e.AudienceMemberID)
	} else {
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	b = text(b, e.URL)
	b = text(b, e.PageHostname)
	b = text(b, e.PagePath)
	b = text(b, e.UserAgent)
	b = text(b, e.IPAddress)
	b = int8(b, e.EventSequence)
	b = boolean(b, e.Queued)
	b = boolean(b, e.QueuePending)
	return int8(b, e.CreatedAt.UnixMicro()-pgEpochMicros)
}

// insertOnce writes rows by one COPY, as insert does; if one of them is stored already (a
// drain repeated after a crash), by COPY into a temporary table and from there into
// tracked_events with ON CONFLICT DO NOTHING (COPY itself cannot skip a conflict).
func (p postgres) insertOnce(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent) error {
	if err := p.insert(ctx, db, rows, nil); err == nil || !database.UniqueViolation(err) {
		return err // stored, or failed otherwise
	}
	buf := encodeCopy(rows)
	return withPgConn(ctx, db, func(pg *pgconn.PgConn) error {
		err := pg.Exec(ctx, onceTempTable).Close()
		if err == nil {
			_, err = pg.CopyFrom(ctx, bytes.NewReader(buf), onceCopySQL)
		}
		if err == nil {
			err = pg.Exec(ctx, onceInsertSQL).Close()
		}
		if err != nil && !pg.IsClosed() { // the connection goes back to the pool: not in a transaction
			pg.Exec(context.WithoutCancel(ctx), "ROLLBACK").Close()
		}
		return err
	})
}

var (
	onceColumns   = `"` + strings.Join(trackedEventColumns, `", "`) + `"`
	onceTempTable = `BEGIN; CREATE TEMP TABLE spool_rows (LIKE tracked_events) ON COMMIT DROP`
	onceCopySQL   = `COPY spool_rows (` + onceColumns + `) FROM STDIN BINARY`
	onceInsertSQL = `INSERT INTO tracked_events (` + onceColumns + `) SELECT ` + onceColumns +
		` FROM spool_rows ON CONFLICT DO NOTHING; COMMIT`
)

// textArray is a Postgres text[] parameter: gorm would spread a plain []string into one
// parameter per element.
type textArray []string

// Value writes the array's text form, every element quoted.
func (a textArray) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}
