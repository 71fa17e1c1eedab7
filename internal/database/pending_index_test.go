package database_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// oldPendingIndex is the index of queue_pending over every row that the versions before
// 2026112602_pending_index made.
const oldPendingIndex = "idx_tracked_events_queue_pending"

// indexDef is the definition of the index name of tracked_events ("" if there is none).
func indexDef(t *testing.T, db *gorm.DB, name string) string {
	t.Helper()
	var defs []string
	q := "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?"
	if database.IsPostgres(db) {
		q = "SELECT indexdef FROM pg_indexes WHERE tablename = 'tracked_events' AND indexname = ?"
	}
	testenv.Must(t, db.Raw(q, name).Scan(&defs).Error)
	return strings.Join(defs, "; ")
}

// A database of the version before, with events marked pending and not, migrates to the
// partial index of the marked events: the index over every row is gone, every row is kept,
// and the queries that find marked events (as the re-pusher writes them) return them alone.
func TestMigrateIndexesOnlyTheEventsMarkedPending(t *testing.T) {
	db := openEmpty(t)
	testenv.Must(t, database.MigrateTo(db, "2026112601_pending_batches"))
	if !database.IsPostgres(db) { // the model had the index then; Postgres's partitioning made it
		testenv.Must(t, db.Exec("CREATE INDEX IF NOT EXISTS "+oldPendingIndex+" ON tracked_events (queue_pending)").Error)
	}
	if indexDef(t, db, oldPendingIndex) == "" {
		t.Fatalf("the previous version's database has no %s", oldPendingIndex)
	}
	now := time.Now().UTC()
	for n := 1; n <= 12; n++ {
		ev := event(n, uint64(1+n%2), now.Add(-time.Duration(n)*time.Minute), true, n%3 == 0)
		testenv.Must(t, db.Create(&ev).Error)
	}
	want := allEvents(t, db)

	testenv.Must(t, database.Migrate(db))
	if def := indexDef(t, db, oldPendingIndex); def != "" {
		t.Errorf("%s still there after migrating: %s", oldPendingIndex, def)
	}
	def := indexDef(t, db, models.PendingIndex)
	if !strings.Contains(def, "(tenant_id, created_at, id) WHERE queue_pending") {
		t.Errorf("%s is %q, want an index of (tenant_id, created_at, id) WHERE queue_pending", models.PendingIndex, def)
	}
	if got := allEvents(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows changed by the migration:\n got %+v\nwant %+v", got, want)
	}
	var marked []string
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Where("queue_pending AND created_at < ?", now).
		Order("created_at, id").Pluck("id", &marked).Error)
	wantMarked := []string{want[11].ID, want[8].ID, want[5].ID, want[2].ID} // events 12, 9, 6, 3: oldest first
	if !reflect.DeepEqual(marked, wantMarked) {
		t.Errorf("marked events %v, want %v", marked, wantMarked)
	}
	testenv.Must(t, database.Migrate(db)) // idempotent
}

// unindexedPartitions lists the partitions of tracked_events without an index attached to
// models.PendingIndex, and says whether that index is valid.
func unindexedPartitions(t *testing.T, db *gorm.DB) (missing []string, valid bool) {
	return partitionsWithout(t, db, models.PendingIndex)
}

// partitionsWithout lists the partitions of tracked_events without an index attached to
// index, and says whether that index is valid.
func partitionsWithout(t *testing.T, db *gorm.DB, index string) (missing []string, valid bool) {
	t.Helper()
	testenv.Must(t, db.Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'tracked_events'::regclass AND NOT EXISTS (
			SELECT 1 FROM pg_inherits j JOIN pg_index x ON x.indexrelid = j.inhrelid
			WHERE j.inhparent = ?::regclass AND x.indrelid = c.oid) ORDER BY 1`, index).Scan(&missing).Error)
	testenv.Must(t, db.Raw("SELECT indisvalid FROM pg_index WHERE indexrelid = ?::regclass", index).Scan(&valid).Error)
	return missing, valid
}

// On Postgres the index is built partition by partition (concurrently, so that ingestion goes
// on) and attached: afterwards every partition has its own and the partitioned table's is
// valid; a partition made later gets one too; and a migration that stopped half-way (the
// partitioned table's index made, one partition's built but not attached) finishes.
func TestPendingIndexIsBuiltOnEveryPartitionAndResumes(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		db := openEmpty(t)
		if !database.IsPostgres(db) {
			t.Skip("partitions are Postgres's")
		}
		testenv.Must(t, database.MigrateTo(db, "2026112601_pending_batches"))
		now := time.Now().UTC()
		for n := 1; n <= 6; n++ {
			ev := event(n, 1, now.AddDate(0, 0, -n), true, n%2 == 0)
			testenv.Must(t, db.Create(&ev).Error)
		}
		if stopped {
			part := database.PartitionName(database.Day(now))
			testenv.Must(t, db.Exec("CREATE INDEX "+models.PendingIndex+" ON ONLY tracked_events (tenant_id, created_at, id) WHERE queue_pending").Error)
			testenv.Must(t, db.Exec("CREATE INDEX "+part+"_pending ON "+part+" (tenant_id, created_at, id) WHERE queue_pending").Error)
			if missing, valid := unindexedPartitions(t, db); valid || len(missing) == 0 {
				t.Fatalf("half-way state: valid %v, partitions without the index %v", valid, missing)
			}
		}
		testenv.Must(t, database.Migrate(db))
		if missing, valid := unindexedPartitions(t, db); !valid || len(missing) > 0 {
			t.Errorf("stopped %v: %s valid %v, partitions without it %v", stopped, models.PendingIndex, valid, missing)
		}
		if def := indexDef(t, db, oldPendingIndex); def != "" {
			t.Errorf("stopped %v: %s still there: %s", stopped, oldPendingIndex, def)
		}
		later := now.AddDate(0, 0, 20)
		_, err := database.EnsurePartitions(context.Background(), db, later, later)
		testenv.Must(t, err)
		if missing, valid := unindexedPartitions(t, db); !valid || len(missing) > 0 {
			t.Errorf("stopped %v: after a new partition, %s valid %v, partitions without it %v", stopped, models.PendingIndex, valid, missing)
		}
	}
}
