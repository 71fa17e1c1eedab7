package tracking

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// trackedEventColumns are the columns both writers fill, in the order of appendCopyRow
// (copyEvents) and appendValues (sqliteInserts).
var trackedEventColumns = []string{"id", "tenant_id", "type", "session_id", "audience_member_id", "url",
	"page_hostname", "page_path", "user_agent", "ip_address", "event_sequence", "queued", "queue_pending", "created_at"}

// copyEvents writes rows to Postgres with one COPY, without the parsing and per-parameter
// work of a multi-row INSERT, and their pending batches with one INSERT, in one transaction.
// The rows go in COPY's binary format, encoded here (appendCopyRow): pgx's own CopyFrom boxes
// every value and encodes it through its type map, which took a seventh of the api's CPU at
// fifty events a request. BEGIN and the INSERT go in one round trip, then the COPY, then
// COMMIT; without pending batches the COPY alone is the transaction.
func copyEvents(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent, pending []models.PendingBatch) error {
	buf := append(make([]byte, 0, 64+len(rows)*512), copyHeader...)
	for i := range rows {
		buf = appendCopyRow(buf, &rows[i])
	}
	buf = binary.BigEndian.AppendUint16(buf, 0xffff) // the trailer: a field count of -1
	insert, params := pendingBatchInsert(pending)
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx) // taken once the rows are encoded, not held while they are
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("tracking: copy: driver connection is %T, not pgx", driverConn)
		}
		pg := c.Conn().PgConn()
		if len(pending) == 0 {
			_, err := pg.CopyFrom(ctx, bytes.NewReader(buf), copySQL)
			return err
		}
		batch := &pgconn.Batch{}
		batch.ExecParams("BEGIN", nil, nil, nil, nil)
		batch.ExecParams(insert, params, nil, nil, nil)
		if _, err := pg.ExecBatch(ctx, batch).ReadAll(); err != nil {
			return rollback(ctx, pg, err)
		}
		if _, err := pg.CopyFrom(ctx, bytes.NewReader(buf), copySQL); err != nil {
			return rollback(ctx, pg, err)
		}
		return pg.Exec(ctx, "COMMIT").Close()
	})
}

// rollback ends the connection's failed transaction and returns err, so that the connection
// goes back to the pool usable (pgx's database/sql adapter would discard one left inside a
// transaction). If even that fails, the connection is closed.
func rollback(ctx context.Context, pg *pgconn.PgConn, err error) error {
	if rerr := pg.Exec(ctx, "ROLLBACK").Close(); rerr != nil {
		pg.Close(ctx)
	}
	return err
}

// insertPendingBatches begins an INSERT of models.PendingBatch rows; their values follow.
const insertPendingBatches = "INSERT INTO pending_batches (id, tenant_id, event_ids, first_at, last_at, created_at) VALUES "

// pendingBatchInsert is the INSERT of pending batches, and its parameters in text form.
func pendingBatchInsert(pending []models.PendingBatch) (string, [][]byte) {
	var q strings.Builder
	q.WriteString(insertPendingBatches)
	params := make([][]byte, 0, 6*len(pending))
	for i, b := range pending {
		if i > 0 {
			q.WriteByte(',')
		}
		fmt.Fprintf(&q, "($%d, $%d, $%d, $%d, $%d, $%d)", 6*i+1, 6*i+2, 6*i+3, 6*i+4, 6*i+5, 6*i+6)
		params = append(params, []byte(b.ID), strconv.AppendUint(nil, b.TenantID, 10), []byte(b.EventIDs),
			pgTime(b.FirstAt), pgTime(b.LastAt), pgTime(b.CreatedAt))
	}
	return q.String(), params
}

// pgTime is t in Postgres's text form of timestamptz.
func pgTime(t time.Time) []byte {
	return t.UTC().AppendFormat(nil, "2006-01-02 15:04:05.999999Z07:00")
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
