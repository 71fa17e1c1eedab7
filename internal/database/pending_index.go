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
// which a query with the value as a parameter could not use (Postgres's cached generic plan then
// read the whole table each time the re-pusher looked), with
// models.PendingIndex, built as eventsIndex builds one.
func pendingIndex(tx *gorm.DB) error {
	if IsPostgres(tx) {
		if err := eventsIndex(tx, models.PendingIndex, "_pending", pendingColumns); err != nil {
			return err
		}
	} else if err := eventsIndex(tx, models.PendingIndex, "", pendingColumns); err != nil {
		return err
	}
	return tx.Exec("DROP INDEX IF EXISTS " + oldPendingIndex).Error
}

// eventsIndex makes index name of tracked_events over columns (a column list, optionally
// followed by a WHERE).
//
// On Postgres it is built without stopping ingestion: an index of the partitioned table alone
// (ON ONLY), then each partition's with CREATE INDEX CONCURRENTLY (named after the partition
// and suffix), attached to it; once every partition has its index, the partitioned table's is
// valid, and each partition made later gets its own. A run that stopped half-way resumes where
// it stopped. On SQLite the index is built in one statement, and writes wait for it.
func eventsIndex(tx *gorm.DB, name, suffix, columns string) error {
	if !IsPostgres(tx) {
		return tx.Exec("CREATE INDEX IF NOT EXISTS " + name + " ON " + EventsTable + " " + columns).Error
	}
	if err := tx.Exec("CREATE INDEX IF NOT EXISTS " + name + " ON ONLY " + EventsTable + " " + columns).Error; err != nil {
		return err
	}
	var parts []string
	if err := tx.Raw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = ?::regclass ORDER BY c.relname`, EventsTable).Scan(&parts).Error; err != nil {
		return err
	}
	for _, part := range parts {
		if err := partitionIndex(tx, name, part, part+suffix, columns); err != nil {
			return fmt.Errorf("index %s: %w", part, err)
		}
	}
	var valid bool
	if err := tx.Raw("SELECT indisvalid FROM pg_index WHERE indexrelid = ?::regclass", name).Scan(&valid).Error; err != nil {
		return err
	}
	if !valid { // a partition made while this ran and not given the index: the next run does it
		return fmt.Errorf("%s is not valid yet: a partition has no index of its own", name)
	}
	return nil
}

// partitionIndex builds partition part's share of index parent, named name, concurrently and
// attaches it, unless the partition has one attached already (a partition made after the
// partitioned table's index gets it with the partition). An invalid index left by a build that
// failed is built again.
func partitionIndex(tx *gorm.DB, parent, part, name, columns string) error {
	var attached int64
	if err := tx.Raw(`SELECT count(*) FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
		WHERE i.inhparent = ?::regclass AND x.indrelid = ?::regclass`, parent, part).Scan(&attached).Error; err != nil {
		return err
	}
	if attached > 0 {
		return nil
	}
	return execAll(tx,
		"DROP INDEX CONCURRENTLY IF EXISTS "+name,
		"CREATE INDEX CONCURRENTLY "+name+" ON "+part+" "+columns,
		"ALTER INDEX "+parent+" ATTACH PARTITION "+name)
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
