package database

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// oldPendingIndex is the index of queue_pending over every row that the versions before
// migration 2026112602_pending_index had.
const oldPendingIndex = "idx_tracked_events_queue_pending"

// pendingColumns is what models.PendingIndex indexes, and of which rows.
const pendingColumns = "(tenant_id, created_at, id) WHERE queue_pending"

// pendingIndex replaces the index of queue_pending over every row, which each insert wrote and
// which a query with the value as a parameter could not use (Postgres's generic plan then read
// the whole table: 150–320 ms at a million rows, each time the re-pusher looked), with
// models.PendingIndex.
//
// On Postgres it is built without stopping ingestion: an index of the partitioned table alone
// (ON ONLY), then each partition's with CREATE INDEX CONCURRENTLY, attached to it; once every
// partition has its index, the partitioned table's is valid, and each partition made later
// gets its own. A run that stopped half-way resumes where it stopped. On SQLite the index is
// built in one statement, and writes wait for it.
func pendingIndex(tx *gorm.DB) error {
	if !IsPostgres(tx) {
		return execAll(tx,
			"DROP INDEX IF EXISTS "+oldPendingIndex,
			"CREATE INDEX IF NOT EXISTS "+models.PendingIndex+" ON "+EventsTable+" "+pendingColumns)
	}
	if err := tx.Exec("CREATE INDEX IF NOT EXISTS " + models.PendingIndex + " ON ONLY " + EventsTable + " " + pendingColumns).Error; err != nil {
		return err
	}
	var parts []string
	if err := tx.Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = ?::regclass ORDER BY c.relname`, EventsTable).Scan(&parts).Error; err != nil {
		return err
	}
	for _, part := range parts {
		if err := pendingIndexOf(tx, part); err != nil {
			return fmt.Errorf("index %s: %w", part, err)
		}
	}
	var valid bool
	if err := tx.Raw("SELECT indisvalid FROM pg_index WHERE indexrelid = ?::regclass", models.PendingIndex).Scan(&valid).Error; err != nil {
		return err
	}
	if !valid { // a partition made while this ran and not given the index: the next run does it
		return fmt.Errorf("%s is not valid yet: a partition has no index of its own", models.PendingIndex)
	}
	return tx.Exec("DROP INDEX IF EXISTS " + oldPendingIndex).Error
}

// pendingIndexOf builds partition part's models.PendingIndex concurrently and attaches it, unless
// the partition has one attached already (a partition made after the partitioned table's index
// gets it with the partition). An invalid index left by a build that failed is built again.
func pendingIndexOf(tx *gorm.DB, part string) error {
	var attached int64
	if err := tx.Raw(`SELECT count(*) FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
		WHERE i.inhparent = ?::regclass AND x.indrelid = ?::regclass`, models.PendingIndex, part).Scan(&attached).Error; err != nil {
		return err
	}
	if attached > 0 {
		return nil
	}
	name := part + "_pending"
	return execAll(tx,
		"DROP INDEX CONCURRENTLY IF EXISTS "+name,
		"CREATE INDEX CONCURRENTLY "+name+" ON "+part+" "+pendingColumns,
		"ALTER INDEX "+models.PendingIndex+" ATTACH PARTITION "+name)
}

// execAll runs each statement in turn, stopping at the first error.
func execAll(tx *gorm.DB, statements ...string) error {
	for _, q := range statements {
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
	}
	return nil
}
