package database_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
)

// Commits on SQLite only append to the write-ahead log; the database file itself changes when
// the log is checkpointed. Far below the automatic checkpoint's threshold, the file still
// takes the committed pages, from the background loop: no commit paid for it.
func TestSQLiteCheckpointsInTheBackground(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.db")
	db, err := database.Open("sqlite://" + path)
	testenv.Must(t, err)
	defer database.Close(db)
	testenv.Must(t, db.Exec("CREATE TABLE t (v TEXT)").Error)
	size := func() int64 {
		fi, err := os.Stat(path)
		testenv.Must(t, err)
		return fi.Size()
	}
	write := func() {
		for range 20 { // about 250 pages: far below the automatic checkpoint's 16,384
			testenv.Must(t, db.Exec("INSERT INTO t (v) SELECT ? FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5)",
				strings.Repeat("x", 10_000)).Error)
		}
	}
	// The writes hold about 1 MB: a checkpoint copies some 240 to 250 pages of 4 KiB into the
	// file, which grows by at least half of that once one has run.
	grows := func(from int64, what string) {
		deadline := time.Now().Add(10 * time.Second)
		for size() < from+500_000 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: database file %d bytes after 10 s (%d before the writes): nothing was checkpointed", what, size(), from)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := size()
	write()
	grows(before, "first writes")

	// A loop that found the log unchanged for a while looks less often, but still sees the
	// next change. The wait lets it settle into that pace: there is nothing to poll for.
	time.Sleep(time.Second) // well past 20 ticks of 10 ms
	before = size()
	write()
	grows(before, "writes after a quiet spell")
}
