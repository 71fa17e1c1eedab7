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

// checkpointers holds the stop channel of each SQLite pool's checkpoint loop.
var checkpointers sync.Map // *sql.DB → chan struct{}

// startCheckpoints runs db's checkpoint loop until stopCheckpoints.
func startCheckpoints(db *sql.DB) {
	stop := make(chan struct{})
	checkpointers.Store(db, stop)
	go func() {
		t := time.NewTicker(checkpointInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				// A failure (the file busy, the pool closing) is retried at the next tick;
				// the automatic checkpoint bounds the log meanwhile.
				db.Exec("PRAGMA wal_checkpoint(PASSIVE)")
			}
		}
	}()
}

// stopCheckpoints ends db's checkpoint loop, if it has one.
func stopCheckpoints(db *sql.DB) {
	if stop, ok := checkpointers.LoadAndDelete(db); ok {
		close(stop.(chan struct{}))
	}
}
