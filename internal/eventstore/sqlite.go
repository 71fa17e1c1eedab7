package eventstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/models"
)

// sqliteInsertChunk is the most rows one SQLite INSERT carries (14 parameters a row): at 100,
// a 1,000-row batch is cheapest on the pure-Go driver (go test -bench of the store).
const sqliteInsertChunk = 100

// sqliteWriter is the dialect of SQLite. It writes events with prepared multi-row INSERTs,
// one statement for each row count from 1 to sqliteInsertChunk, prepared on first use and
// kept: neither the SQL text nor gorm's reflection is redone per batch.
//
// It also keeps the process's writes to the stored events one at a time (write): SQLite has a
// single writer, and a connection that finds the write lock taken sleeps in its busy handler
// (1 ms, then 2, 5, … up to 100 ms a try) instead of being woken when the lock is free. The
// committer's INSERTs and the statements that settle appended events met that way; all of
// them go through write.
type sqliteWriter struct {
	db      *gorm.DB
	mu      sync.Mutex
	stmts   [sqliteInsertChunk + 1]*sql.Stmt
	writeMu sync.Mutex
}

func newSQLite(db *gorm.DB) *sqliteWriter { return &sqliteWriter{db: db} }

// insert writes rows and their pending batches in one statement, or in one transaction when
// they need more than one: all of them or none. Its caller holds the write lock.
func (s *sqliteWriter) insert(ctx context.Context, _ *gorm.DB, rows []models.TrackedEvent, pending []models.PendingBatch) error {
	return s.insertLocked(ctx, rows, pending)
}

// insertOnce writes rows in one transaction, skipping those stored already.
func (s *sqliteWriter) insertOnce(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent) error {
	return db.Transaction(func(tx *gorm.DB) error {
		return tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, 500).Error
	})
}

// write runs fn as the process's one writer to the stored events.
func (s *sqliteWriter) write(fn func() error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return fn()
}

func (s *sqliteWriter) locking(db *gorm.DB, fn func(*gorm.DB) error) error { return fn(db) }

// writers is one: SQLite has a single writer.
func (s *sqliteWriter) writers() int   { return 1 }
func (s *sqliteWriter) markChunk() int { return 200 }

// writableCTE is false: SQLite takes no INSERT in a WITH clause.
func (s *sqliteWriter) writableCTE() bool { return false }

func (s *sqliteWriter) idIn(q *gorm.DB, ids []string) *gorm.DB { return q.Where("id IN ?", ids) }

// lock locks nothing: a read in SQLite's transaction would hold the whole database's write lock.
func (s *sqliteWriter) lock(q *gorm.DB, _ string) *gorm.DB { return q }

// pendingFrom names models.PendingIndex: SQLite's planner would rather walk the
// (tenant_id, created_at) index of every event.
func (s *sqliteWriter) pendingFrom() string {
	return "tracked_events INDEXED BY " + models.PendingIndex
}

// serial runs fn on the pool, not in a transaction, which on SQLite takes the write lock at once.
func (s *sqliteWriter) serial(db *gorm.DB, fn func(*gorm.DB) error) error { return fn(db) }

// analyze does nothing: SQLite reads a range by the (tenant_id, created_at) index with or
// without statistics.
func (s *sqliteWriter) analyze(context.Context, *gorm.DB) {}

// insertLocked is insert, its caller holding the write lock.
func (s *sqliteWriter) insertLocked(ctx context.Context, rows []models.TrackedEvent, pending []models.PendingBatch) error {
	if len(rows) <= sqliteInsertChunk && len(pending) == 0 { // one statement is atomic by itself: no BEGIN/COMMIT
		st, err := s.stmt(ctx, len(rows))
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, sqliteArgs(rows)...)
		return err
	}
	db, err := s.db.DB()
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op once committed
	for len(rows) > 0 {
		n := min(len(rows), sqliteInsertChunk)
		st, err := s.stmt(ctx, n)
		if err != nil {
			return err
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, sqliteArgs(rows[:n])...); err != nil {
			return err
		}
		rows = rows[n:]
	}
	for _, b := range pending {
		if _, err := tx.ExecContext(ctx, insertPendingBatchSQL, b.ID, int64(b.TenantID), b.EventIDs, b.FirstAt, b.LastAt, b.CreatedAt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// insertPendingBatchSQL writes one models.PendingBatch.
const insertPendingBatchSQL = insertPendingBatches + "(?, ?, ?, ?, ?, ?)"

// stmt is the prepared INSERT of n rows.
func (s *sqliteWriter) stmt(ctx context.Context, n int) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stmts[n]; st != nil {
		return st, nil
	}
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", len(trackedEventColumns)), ",") + ")"
	query := "INSERT INTO tracked_events (" + strings.Join(trackedEventColumns, ",") + ") VALUES " +
		strings.TrimSuffix(strings.Repeat(row+",", n), ",")
	db, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	st, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare %d-row insert: %w", n, err)
	}
	s.stmts[n] = st
	return st, nil
}

// close releases the prepared statements.
func (s *sqliteWriter) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range s.stmts {
		if st != nil {
			st.Close()
			s.stmts[i] = nil
		}
	}
}

// sqliteArgs are the parameters of rows, in the order of trackedEventColumns.
func sqliteArgs(rows []models.TrackedEvent) []any {
	args := make([]any, 0, len(rows)*len(trackedEventColumns))
	for i := range rows {
		args = appendValues(args, &rows[i])
	}
	return args
}

// appendValues appends e's column values to dst, in the order of trackedEventColumns; a
// missing audience member is an untyped nil, which the driver writes as NULL.
func appendValues(dst []any, e *models.TrackedEvent) []any {
	var member any
	if e.AudienceMemberID != nil {
		member = *e.AudienceMemberID
	}
	return append(dst, e.ID, int64(e.TenantID), e.Type, e.SessionID, member, e.URL, e.PageHostname,
		e.PagePath, e.UserAgent, e.IPAddress, e.EventSequence, e.Queued, e.QueuePending, e.CreatedAt)
}
