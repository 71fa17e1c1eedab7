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

// An export on Postgres first analyzes the day partitions it would read that hold rows but
// were never analyzed (autovacuum off, as in the suite, or not yet round): without statistics
// each page of the export sorted every row of the tenant left in the partition. The day is one
// no other test uses, so that its partition is new.
func TestExportAnalyzesPartitionsWithoutStatistics(t *testing.T) {
	db, url := testenv.DB(t)
	statisticsApply(t, db)
	day := time.Date(2031, 3, 7, 0, 0, 0, 0, time.UTC)
	_, err := database.EnsurePartitions(context.Background(), db, day, day)
	testenv.Must(t, err)
	part := database.PartitionName(day)
	gen, err := database.Open(url) // a connection of its own, closed: Postgres counts its rows at once
	testenv.Must(t, err)
	testenv.Must(t, gen.Exec(`INSERT INTO tracked_events (id, tenant_id, type, session_id, url, page_hostname, page_path,
		user_agent, ip_address, event_sequence, queued, queue_pending, created_at)
		SELECT 'a0000000-0000-7000-8000-' || lpad(i::text, 12, '0'), 1, 'page_view', 's', 'https://shop.example/', 'shop.example',
			'/', 'ua', '203.0.113.7', i, false, false, CAST(? AS timestamptz) + i * interval '1 millisecond'
		FROM generate_series(0, 29999) AS i`, day).Error)
	sqlDB, err := gen.DB()
	testenv.Must(t, err)
	testenv.Must(t, sqlDB.Close())
	type state struct {
		Analyzed bool
		Rows     int64
	}
	stats := func() state {
		var st state
		testenv.Must(t, db.Raw(`SELECT last_analyze IS NOT NULL AS analyzed, n_mod_since_analyze AS rows
			FROM pg_stat_user_tables WHERE relname = ?`, part).Scan(&st).Error)
		return st
	}
	testenv.Eventually(t, 30*time.Second, "Postgres counts the rows inserted", func() bool { return stats().Rows >= 30000 })
	if st := stats(); st.Analyzed {
		t.Fatalf("the new partition %s was analyzed before the export: %+v", part, st)
	}
	n, err := JSONL(context.Background(), eventstore.New(db), io.Discard, Query{TenantID: 1, From: day, To: day.AddDate(0, 0, 1)})
	if err != nil || n != 30000 {
		t.Fatalf("exported %d, %v", n, err)
	}
	if st := stats(); !st.Analyzed {
		t.Errorf("partition %s holds rows and was not analyzed by the export: %+v", part, st)
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
