package database

import (
	"database/sql"
	"os"
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
//
// The interval is short because a checkpoint's sync still slows the commits beside it (the
// same commits on a tmpfs, which syncs nothing, had no such tail), and the stall grows with
// what the checkpoint copied; shorter still, the median commit rose (`go run ./bench -only
// checkpoint`, figures in docs/performance-log.md). A tick whose log has not changed since the
// last (its size and modification time, one stat) runs nothing, and after quietTicks such
// ticks the loop looks every idleCheckpointInterval until the log changes again, so that an
// idle process does not wake a hundred times a second.
const (
	checkpointInterval     = 10 * time.Millisecond
	idleCheckpointInterval = 250 * time.Millisecond
	quietTicks             = 20
	walBacklogPages        = 16384 // 64 MiB of 4 KiB pages
)

// checkpointers holds each SQLite pool's checkpoint loop.
var checkpointers sync.Map // *sql.DB → checkpointer

type checkpointer struct {
	stop, done chan struct{}
	path       string
}

// startCheckpoints runs the checkpoint loop of db, whose database file is path, until
// stopCheckpoints: every interval while the log changes, every idleInterval after quietTicks
// ticks that found it unchanged.
func startCheckpoints(db *sql.DB, path string, interval, idleInterval time.Duration) {
	cp := checkpointer{stop: make(chan struct{}), done: make(chan struct{}), path: path}
	checkpointers.Store(db, cp)
	go func() {
		defer close(cp.done)
		t := time.NewTimer(interval)
		defer t.Stop()
		var seen walState
		quiet := 0 // ticks in a row that found the log unchanged
		for {
			select {
			case <-cp.stop:
				return
			case <-t.C:
			}
			if now := statWAL(path); now != seen {
				seen, quiet = now, 0
				if _, err := db.Exec("PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
					// The file busy, the pool closing: retried at the next tick. The
					// automatic checkpoint bounds the log meanwhile.
					seen = walState{}
				}
			} else {
				quiet++
			}
			if quiet >= quietTicks {
				t.Reset(idleInterval)
			} else {
				t.Reset(interval)
			}
		}
	}()
}

// walState is what a stat of the write-ahead log tells of its changes.
type walState struct {
	size    int64
	modTime time.Time
}

// statWAL stats the write-ahead log of the database file path (the zero walState if it has
// none). A commit writes to the log, so a state unchanged since the last checkpoint means
// nothing new to copy; a commit within the same tick of the file system's clock as the stat
// waits for the next commit's change, which is harmless: the log holds it meanwhile.
func statWAL(path string) walState {
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		return walState{}
	}
	return walState{fi.Size(), fi.ModTime()}
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
