package export

import (
	"context"
	"io"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
)

// generateAndReport is mustGenerate on a connection of its own, closed afterwards: a backend
// reports its row counts when it ends, where one left idle in a pool may take 10 s to.
func generateAndReport(t *testing.T, url string, tenant uint64, n int) {
	t.Helper()
	db, err := database.Open(url)
	testenv.Must(t, err)
	mustGenerate(t, db, tenant, n)
	sqlDB, err := db.DB()
	testenv.Must(t, err)
	testenv.Must(t, sqlDB.Close())
}

// statisticsApply skips the test unless db is one Postgres server: SQLite reads by the index
// without statistics, and on Citus the nodes plan their shards themselves.
func statisticsApply(t *testing.T, db *gorm.DB) {
	t.Helper()
	if !database.IsPostgres(db) || eventstore.New(db).Distributed() {
		t.Skip("statistics are a single Postgres server's")
	}
}

// analyzed reports, for every day partition of the events holding rows, whether it has
// statistics.
func analyzed(t *testing.T, db *gorm.DB) map[string]bool {
	t.Helper()
	var rows []struct {
		Name     string
		Analyzed bool
		Rows     int64
	}
	err := db.Raw(`SELECT c.relname AS name, (st.last_analyze IS NOT NULL OR st.last_autoanalyze IS NOT NULL) AS analyzed,
		st.n_mod_since_analyze AS rows
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_stat_user_tables st ON st.relid = c.oid
		WHERE i.inhparent = ?::regclass`, database.EventsTable).Scan(&rows).Error
	testenv.Must(t, err)
	out := map[string]bool{}
	for _, r := range rows {
		if r.Analyzed || r.Rows > 0 {
			out[r.Name] = r.Analyzed
		}
	}
	return out
}

// An export on Postgres first analyzes the day partitions it would read that hold rows but
// were never analyzed (autovacuum off, as in the suite, or not yet round): without statistics
// each page of the export sorted every row of the tenant left in the partition.
func TestExportAnalyzesPartitionsWithoutStatistics(t *testing.T) {
	db, url := testenv.DB(t)
	statisticsApply(t, db)
	generateAndReport(t, url, 1, 30000)
	testenv.Eventually(t, 30*time.Second, "Postgres counts the rows inserted", func() bool {
		for _, ok := range analyzed(t, db) {
			if !ok {
				return true
			}
		}
		return false
	})
	before := analyzed(t, db)
	n, err := JSONL(context.Background(), eventstore.New(db), io.Discard, Query{TenantID: 1})
	if err != nil || n != 30000 {
		t.Fatalf("exported %d, %v", n, err)
	}
	after := analyzed(t, db)
	for name, ok := range before {
		if !ok && !after[name] {
			t.Errorf("partition %s holds rows and was not analyzed by the export (before %v, after %v)", name, before, after)
		}
	}
}

// The same for a partition analyzed while nearly empty, as a maintenance run may have done
// before the day's rows arrived: its statistics no longer fit.
func TestExportAnalyzesPartitionsWhoseStatisticsAreStale(t *testing.T) {
	db, url := testenv.DB(t)
	statisticsApply(t, db)
	mustGenerate(t, db, 1, 100)
	testenv.Must(t, db.Exec("ANALYZE "+database.EventsTable).Error)
	var at time.Time
	testenv.Must(t, db.Raw(`SELECT now()`).Scan(&at).Error)
	testenv.Must(t, db.Exec(`DELETE FROM `+database.EventsTable).Error)
	generateAndReport(t, url, 1, 30000)
	stale := func() []string {
		var parts []string
		testenv.Must(t, db.Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			JOIN pg_stat_user_tables st ON st.relid = c.oid
			WHERE i.inhparent = ?::regclass AND st.last_analyze < ? AND st.n_mod_since_analyze >= 30000`, database.EventsTable, at).Scan(&parts).Error)
		return parts
	}
	testenv.Eventually(t, 30*time.Second, "Postgres counts the rows inserted", func() bool { return len(stale()) > 0 })
	n, err := JSONL(context.Background(), eventstore.New(db), io.Discard, Query{TenantID: 1})
	if err != nil || n != 30000 {
		t.Fatalf("exported %d, %v", n, err)
	}
	if parts := stale(); len(parts) > 0 {
		t.Errorf("partitions %v keep the statistics of 100 rows after an export of 30,000", parts)
	}
}
