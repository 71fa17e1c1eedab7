package delivery

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The Ingestor's own writes on SQLite (the committer's INSERTs, the DELETEs of pending
// batches once their events are appended) never meet SQLite's write lock held by each other: they would wait in the
// busy handler, which sleeps. On a database opened without a busy timeout, a write that met
// the lock fails at once with SQLITE_BUSY instead; none may.
func TestSQLiteWritesOfTheIngestorTakeTurns(t *testing.T) {
	if testenv.Backend() != "sqlite" {
		t.Skip("SQLite's single writer: Postgres writers do not exclude each other")
	}
	_, url := testenv.DB(t)
	dsn := strings.TrimPrefix(url, "sqlite://") + "?_pragma=busy_timeout(0)&_pragma=journal_mode(WAL)&_txlock=immediate&_time_format=sqlite"
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent), SkipDefaultTransaction: true})
	testenv.Must(t, err)
	r := testenv.StartRedis(t)
	var logs strings.Builder
	var logMu sync.Mutex
	events := eventstore.New(db)
	in := New(Options{DB: db, Events: events, Queue: eventqueue.New(r.Client()), Queueing: features.New(db, clock.Real{}), Clock: clock.Real{},
		Log: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	t.Cleanup(func() { in.Close(); events.Close() })
	tenant := testenv.MustTenant(t, db, true).ID

	stored := make(chan appendedBatch, 64)
	var wg sync.WaitGroup
	var storeErr error
	wg.Add(2)
	go func() { // the committer's side: batches of 250 rows, three statements in one transaction
		defer wg.Done()
		defer close(stored)
		for b := range 40 {
			rows := make([]models.TrackedEvent, 250)
			for i := range rows {
				rows[i] = newRow(uuid.Must(uuid.NewV7()).String(), tenant, input("s", int64(b*250+i)), Client{UserAgent: "ua", IPAddress: "127.0.0.1"}, time.Now().UTC())
				rows[i].Queued = true
			}
			req := &commitRequest{tenant: tenant, rows: rows, queued: true}
			if storeErr = in.store(context.Background(), []*commitRequest{req}, len(rows)); storeErr != nil {
				return
			}
			stored <- appendedBatch{id: req.pending, tenant: tenant, appended: len(rows)}
		}
	}()
	go func() { // the unmark loop's side
		defer wg.Done()
		for b := range stored {
			in.settleBatches([]appendedBatch{b})
		}
	}()
	wg.Wait()
	if storeErr != nil {
		t.Fatalf("a store met the lock: %v", storeErr)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "could not delete pending batches") {
		t.Fatalf("a delete met the lock:\n%s", logs.String())
	}
	pending, err := eventstore.New(db).Count(context.Background(), tenant)
	testenv.Must(t, err)
	if pending != 0 {
		t.Fatalf("%d events still pending, want 0", pending)
	}
}

// lockedWriter serialises a log's writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
