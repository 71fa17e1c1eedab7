package database

import (
	"database/sql"
	"sync"
	"time"
)

// SQLite in WAL mode copies the log back into the database file (a checkpoint, which syncs the
// file) when the log has grown past wal_autocheckpoint pages, inside the COMMIT that crossed
// the line. Ingestion has one committer on SQLite, so every request waiting for the next batch
// waited for that checkpoint too: at 50 events a request one ran every few hundred
// milliseconds and set the tail of the latency. Instead, a goroutine per open database runs a
// passive checkpoint every checkpointInterval, which never blocks writers nor readers; the
// automatic one stays as a backstop at walBacklogPages, for a process whose loop falls behind.
const (
	checkpointInterval = 200 * time.Millisecond
	walBacklogPages    = 16384 // 64 MiB of 4 KiB pages
)

// checkpointers holds each SQLite pool's checkpoint loop.
var checkpointers sync.Map // *sql.DB → checkpointer

type checkpointer struct{ stop, done chan struct{} }

// startCheckpoints runs db's checkpoint loop until stopCheckpoints.
func startCheckpoints(db *sql.DB) {
	cp := checkpointer{stop: make(chan struct{}), done: make(chan struct{})}
	checkpointers.Store(db, cp)
	go func() {
		defer close(cp.done)
		t := time.NewTicker(checkpointInterval)
		defer t.Stop()
		for {
			select {
			case <-cp.stop:
				return
			case <-t.C:
				// A failure (the file busy, the pool closing) is retried at the next tick;
				// the automatic checkpoint bounds the log meanwhile.
				db.Exec("PRAGMA wal_checkpoint(PASSIVE)")
			}
		}
	}()
}

// stopCheckpoints ends db's checkpoint loop, if it has one, and waits for a checkpoint in
// progress, so that its connection is back in the pool when the pool closes.
func stopCheckpoints(db *sql.DB) {
	if v, ok := checkpointers.LoadAndDelete(db); ok {
		cp := v.(checkpointer)
		close(cp.stop)
		<-cp.done
	}
}
