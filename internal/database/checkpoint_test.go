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
	before := size()
	for range 20 { // about 250 pages: far below the automatic checkpoint's 16,384
		testenv.Must(t, db.Exec("INSERT INTO t (v) SELECT ? FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5)",
			strings.Repeat("x", 10_000)).Error)
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() < before+1_000_000 {
		if time.Now().After(deadline) {
			t.Fatalf("database file %d bytes after 10 s (%d before the writes): nothing was checkpointed", size(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
