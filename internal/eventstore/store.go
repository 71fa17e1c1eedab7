// Package eventstore owns the stored events (tracked_events) and the records of the events not
// known to be in their queue yet: the pending batches (pending_batches) and the pending marks
// on events (tracked_events.queue_pending). Every read and write of those tables goes through
// it; the schema and its day partitions belong to internal/database.
//
// Each database has its own implementation of the statements that differ (a dialect): a
// Postgres one, which writes by COPY, reads the pending marks in row-locking transactions and
// knows the day partitions, and a SQLite one, which writes by prepared INSERTs as the process's
// one writer and names the indexes its planner would not pick. Callers never ask which one runs.
//
// Names used here and by internal/delivery:
//   - a pending batch is the record, written with a commit's rows, of the events of one tenant
//     that are to be appended to its queue; it is deleted once they are;
//   - a pending mark is the same record on one event, for the events whose batch was claimed
//     (the batch was not settled in time) or whose append the queue held back;
//   - settling is deleting an appended batch or clearing the marks of appended events.
package eventstore

import (
	"context"
	"strings"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// Store reads and writes the stored events. It is safe for concurrent use.
type Store struct {
	db          *gorm.DB
	d           dialect
	distributed bool
}

// New returns the Store of db, with the dialect of db's database. A Citus coordinator is
// recognised when db answers at once; otherwise the store takes it for one server.
func New(db *gorm.DB) *Store {
	if database.IsPostgres(db) {
		citus, _ := database.IsCitus(db)
		return &Store{db: db, d: postgres{}, distributed: citus}
	}
	return &Store{db: db, d: newSQLite(db)}
}

// Distributed reports whether the events are spread over several servers (Citus), where a
// slow commit may be one node's, not the whole database's.
func (s *Store) Distributed() bool { return s.distributed }

// Close releases what the store prepared. The store must not be used after it.
func (s *Store) Close() { s.d.close() }

// Writers is how many batches of events are best written at once: one on a database with a
// single writer, more where writes overlap.
func (s *Store) Writers() int { return s.d.writers() }

// MarkChunk is the most event ids one statement that changes pending marks carries.
func (s *Store) MarkChunk() int { return s.d.markChunk() }

// WritableCTE reports whether one statement may write the stored events beside other tables
// (an INSERT in a WITH clause): a write of several tables is then one round trip.
func (s *Store) WritableCTE() bool { return s.d.writableCTE() }

// InsertInto begins an INSERT of stored events: the table and the columns every write fills,
// in the order of Columns. Its values (or a SELECT of them) follow.
func InsertInto() string {
	return "INSERT INTO tracked_events (" + strings.Join(trackedEventColumns, ", ") + ")"
}

// In is the store's statements run in tx, a transaction of the caller's that writes other
// tables too.
func (s *Store) In(tx *gorm.DB) Tx { return Tx{tx, s.d} }

// Write runs fn as the process's one writer to the stored events where the database has a
// single writer (so that writers queue in the process, not in the database's busy wait), and
// runs it as it is elsewhere.
func (s *Store) Write(fn func() error) error { return s.d.write(fn) }

// Update runs fn in one write transaction, as the process's one writer where there is one.
func (s *Store) Update(ctx context.Context, fn func(Tx) error) error {
	return s.Write(func() error {
		return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return fn(Tx{tx, s.d}) })
	})
}

// Locking runs fn where the events it reads with Tx.Oldest stay locked until fn returns, so
// that concurrent callers share a backlog instead of reading the same events: a transaction on
// Postgres. SQLite has one writer for the whole database, and holding its lock across the
// caller's round trips to Redis would stall ingestion: there fn runs on the pool, each
// statement on its own (a second caller may then read an event again).
func (s *Store) Locking(ctx context.Context, fn func(Tx) error) error {
	return s.d.locking(s.db.WithContext(ctx), func(tx *gorm.DB) error { return fn(Tx{tx, s.d}) })
}

// Pool is the store's statements run on the connection pool, each on its own.
func (s *Store) Pool(ctx context.Context) Tx { return Tx{s.db.WithContext(ctx), s.d} }

// Tx runs the store's statements in a transaction (Update, Locking) or on the pool (Pool).
type Tx struct {
	db *gorm.DB
	d  dialect
}

// dialect is what differs between the databases.
type dialect interface {
	// insert writes rows and their pending batches, all or none.
	insert(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent, pending []models.PendingBatch) error
	// insertOnce writes rows, all or none, skipping those stored already.
	insertOnce(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent) error
	write(fn func() error) error
	locking(db *gorm.DB, fn func(*gorm.DB) error) error
	close()
	writers() int
	markChunk() int
	// idIn restricts q to the events of ids.
	idIn(q *gorm.DB, ids []string) *gorm.DB
	// lock locks the rows q reads, with the locking options given, until the transaction ends.
	lock(q *gorm.DB, options string) *gorm.DB
	// pendingFrom is the FROM of a read of the pending marks, through models.PendingIndex.
	pendingFrom() string
	// serial runs a long read of one tenant's events without taking every core.
	serial(db *gorm.DB, fn func(*gorm.DB) error) error
	// analyze gives the planner the statistics a long read of events needs, where they are
	// missing.
	analyze(ctx context.Context, db *gorm.DB)
	writableCTE() bool
	sweep() sweepPace
	prune() prunePace
}
