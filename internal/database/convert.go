package database

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// prepareRetention readies the stored events for pruning: on Postgres it partitions
// tracked_events by day (partitionEvents); on SQLite it turns on incremental auto-vacuum, so
// that the pages of deleted rows can be given back to the file system.
func prepareRetention(tx *gorm.DB, now time.Time) error {
	if IsPostgres(tx) {
		return partitionEvents(tx, now)
	}
	return incrementalVacuum(tx)
}

// partitionEvents turns an unpartitioned tracked_events into one partitioned by UTC day of
// created_at and keeps every row, with its queue bookkeeping columns: a partition for each
// day that has rows, for yesterday, today and the PartitionsAhead days after, and the default
// partition. It runs in one transaction holding an ACCESS EXCLUSIVE lock on the table, so
// ingestion waits for it: its time grows with the rows (see docs/operations.md). Indexes are
// built after the rows are copied, which is faster than maintaining them row by row. A row
// without created_at (none is written so) gets the migration's time.
func partitionEvents(db *gorm.DB, now time.Time) error {
	var kind string
	err := db.Raw(`SELECT relkind FROM pg_class WHERE relname = ? AND relnamespace = current_schema()::regnamespace`, EventsTable).Scan(&kind).Error
	if err != nil || kind == "p" {
		return err
	}
	const old = EventsTable + "_unpartitioned"
	return db.Transaction(func(tx *gorm.DB) error {
		exec := func(format string, args ...any) error {
			if err := tx.Exec(fmt.Sprintf(format, args...)).Error; err != nil {
				return fmt.Errorf("partition %s: %w", EventsTable, err)
			}
			return nil
		}
		if err := exec(`LOCK TABLE %s IN ACCESS EXCLUSIVE MODE`, EventsTable); err != nil {
			return err
		}
		if err := tx.Exec(fmt.Sprintf(`UPDATE %s SET created_at = ? WHERE created_at IS NULL`, EventsTable), now.UTC()).Error; err != nil {
			return err
		}
		if err := exec(`ALTER TABLE %s RENAME TO %s`, EventsTable, old); err != nil {
			return err
		}
		if err := exec(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS) PARTITION BY RANGE (created_at)`, EventsTable, old); err != nil {
			return err
		}
		if err := exec(`CREATE TABLE %s PARTITION OF %s DEFAULT`, DefaultPartition, EventsTable); err != nil {
			return err
		}
		var days []time.Time
		err := tx.Raw(fmt.Sprintf(`SELECT DISTINCT date_trunc('day', created_at AT TIME ZONE 'UTC') FROM %s`, old)).Scan(&days).Error
		if err != nil {
			return err
		}
		want := map[time.Time]bool{}
		for _, d := range days {
			want[Day(d)] = true
		}
		for d := Day(now).AddDate(0, 0, -1); !d.After(Day(now).AddDate(0, 0, PartitionsAhead)); d = d.AddDate(0, 0, 1) {
			want[d] = true
		}
		for d := range want {
			err := exec(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`, PartitionName(d), EventsTable,
				d.Format(time.RFC3339), d.AddDate(0, 0, 1).Format(time.RFC3339))
			if err != nil {
				return err
			}
		}
		for _, s := range []string{
			`INSERT INTO %[1]s SELECT * FROM %[2]s`,
			`DROP TABLE %[2]s`,
			`ALTER TABLE %[1]s ADD CONSTRAINT %[1]s_pkey PRIMARY KEY (id, created_at)`,
			`CREATE INDEX %[1]s_tenant_created ON %[1]s (tenant_id, created_at)`,
			`CREATE INDEX idx_%[1]s_queue_pending ON %[1]s (queue_pending)`,
		} {
			if err := exec(s, EventsTable, old); err != nil {
				return err
			}
		}
		return nil
	})
}

// incrementalVacuum switches a SQLite database to auto_vacuum=INCREMENTAL, which takes one
// VACUUM (a rewrite of the whole file) on a database created before. New databases get it
// from Open and skip the VACUUM.
func incrementalVacuum(db *gorm.DB) error {
	return db.Connection(func(conn *gorm.DB) error {
		var mode int
		if err := conn.Raw("PRAGMA auto_vacuum").Scan(&mode).Error; err != nil || mode == 2 {
			return err
		}
		if err := conn.Exec("PRAGMA auto_vacuum = INCREMENTAL").Error; err != nil {
			return err
		}
		return conn.Exec("VACUUM").Error
	})
}
