package database

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// On Postgres, tracked_events is partitioned by range of created_at, one partition per UTC
// day (tracked_events_pYYYYMMDD), plus a default partition (tracked_events_default) that takes
// any row whose day has no partition yet, so that no insert is ever refused for want of one.
// The default partition stays empty in normal operation: the worker keeps PartitionsAhead days
// of partitions created ahead, and a partition created for a day that has rows in the default
// partition takes them over. Maintenance DDL runs under DDLLockTimeout, so that ingestion,
// which queues behind a waiting DDL statement, never waits on it for longer.

const (
	// EventsTable is the table of stored events.
	EventsTable = "tracked_events"
	// DefaultPartition is the partition of rows whose day has no partition of its own.
	DefaultPartition = EventsTable + "_default"
	// PartitionsAhead is how many days after today the worker keeps partitions for.
	PartitionsAhead = 7
	// DDLLockTimeout bounds how long a maintenance statement waits for a lock (and so how long
	// anything queued behind it waits); a statement that times out is tried again later.
	DDLLockTimeout = 500 * time.Millisecond

	partitionPrefix = EventsTable + "_p"
	dayLayout       = "20060102"
	// maintenanceLock is the advisory lock key that serialises partition DDL across processes.
	maintenanceLock = 0x6576656e7471 // "eventq"
	ddlAttempts     = 3
)

// Day returns the start of the UTC day that contains t.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// PartitionName is the name of the partition of the UTC day that starts at day.
func PartitionName(day time.Time) string { return partitionPrefix + day.UTC().Format(dayLayout) }

// Partition is one day partition of tracked_events.
type Partition struct {
	Name string
	Day  time.Time // the start of its UTC day
}

// Partitions lists the day partitions of tracked_events, oldest first (the default partition
// is not one). It returns nothing on SQLite.
func Partitions(ctx context.Context, db *gorm.DB) ([]Partition, error) {
	if !IsPostgres(db) {
		return nil, nil
	}
	var names []string
	err := db.WithContext(ctx).Raw(`SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = ? AND p.relnamespace = current_schema()::regnamespace ORDER BY c.relname`, EventsTable).
		Scan(&names).Error
	if err != nil {
		return nil, fmt.Errorf("database: list partitions: %w", err)
	}
	return parsePartitions(names), nil
}

// parsePartitions keeps the day partitions' names of names, with their days.
func parsePartitions(names []string) []Partition {
	var out []Partition
	for _, n := range names {
		if day, err := time.Parse(dayLayout, strings.TrimPrefix(n, partitionPrefix)); err == nil && strings.HasPrefix(n, partitionPrefix) {
			out = append(out, Partition{Name: n, Day: day})
		}
	}
	return out
}

// EnsurePartitions creates the missing day partitions of the days from the day of from to the
// day of to, both included, and returns how many it created. It is idempotent and safe to run
// from several processes at once. A day that already has rows in the default partition gets
// them moved into its new partition. It does nothing on SQLite.
func EnsurePartitions(ctx context.Context, db *gorm.DB, from, to time.Time) (int, error) {
	if !IsPostgres(db) {
		return 0, nil
	}
	existing, err := Partitions(ctx, db)
	if err != nil {
		return 0, err
	}
	have := map[time.Time]bool{}
	for _, p := range existing {
		have[p.Day] = true
	}
	created := 0
	for day := Day(from); !day.After(Day(to)); day = day.AddDate(0, 0, 1) {
		if have[day] {
			continue
		}
		made, err := createPartition(ctx, db, day)
		if err != nil {
			return created, err
		}
		if made {
			created++
		}
	}
	return created, nil
}

// createPartition creates the day's partition as a table of its own and attaches it, which
// takes a SHARE UPDATE EXCLUSIVE lock on tracked_events (inserts and reads go on) where
// CREATE TABLE … PARTITION OF would take an ACCESS EXCLUSIVE one. The CHECK constraint
// matching the bounds spares ATTACH a scan of the new table.
func createPartition(ctx context.Context, db *gorm.DB, day time.Time) (bool, error) {
	name, from, to := PartitionName(day), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339)
	made := false
	err := ddl(ctx, db, func(tx *gorm.DB) error {
		made = false
		if exists, err := tableExists(tx, name); err != nil || exists {
			return err
		}
		bounds := fmt.Sprintf("created_at >= '%s' AND created_at < '%s'", from, to)
		stmts := []string{
			fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS)`, name, EventsTable),
			fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s_bounds CHECK (%s)`, name, name, bounds),
			// The default partition is locked before rows are moved out of it, so that none
			// arrives in between; it is normally empty, and then this takes a moment.
			fmt.Sprintf(`LOCK TABLE %s IN ACCESS EXCLUSIVE MODE`, DefaultPartition),
			fmt.Sprintf(`INSERT INTO %s SELECT * FROM %s WHERE %s`, name, DefaultPartition, bounds),
			fmt.Sprintf(`DELETE FROM %s WHERE %s`, DefaultPartition, bounds),
			fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, EventsTable, name, from, to),
		}
		for _, s := range stmts {
			if err := tx.Exec(s).Error; err != nil {
				return err
			}
		}
		made = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("database: create partition %s: %w", name, err)
	}
	return made, nil
}

// DropPartition detaches a day partition, counts its rows and drops it with them. DETACH …
// CONCURRENTLY does not apply: Postgres refuses it on a table with a default partition. The
// plain DETACH holds an ACCESS EXCLUSIVE lock on tracked_events, so it runs alone in its
// transaction (a catalog change: milliseconds), and the DROP, which deletes the files, in a
// second one that locks only the detached table. Waiting for either lock is bounded by
// DDLLockTimeout. A table left detached by a crash between the two is a DetachedPartition
// and is dropped by a later call. The rows are counted once the table is detached, between
// the two transactions, by countDetached: paced, so that the count of a large day leaves the
// shared cores to ingestion. It reports how many rows went with the table, and false if it
// was gone already (another process dropped it).
func DropPartition(ctx context.Context, db *gorm.DB, name string) (int64, bool, error) {
	if !strings.HasPrefix(name, partitionPrefix) {
		return 0, false, fmt.Errorf("database: %s is not a day partition", name)
	}
	exists := false
	err := ddl(ctx, db, func(tx *gorm.DB) error {
		var attached bool
		var err error
		if exists, attached, err = partitionState(tx, name); err != nil || !attached {
			return err
		}
		return tx.Exec(fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, EventsTable, name)).Error
	})
	var rows int64
	if err == nil && exists {
		rows, err = countDetached(ctx, db, name)
		if isUndefinedTable(err) { // another process dropped it meanwhile
			return 0, false, nil
		}
	}
	if err == nil && exists {
		err = ddl(ctx, db, func(tx *gorm.DB) error {
			// Under the maintenance lock: another process's drop is over or not begun.
			if exists, err = tableExists(tx, name); err != nil || !exists {
				return err
			}
			return tx.Exec(fmt.Sprintf(`DROP TABLE %s`, name)).Error
		})
	}
	if err != nil {
		return 0, false, fmt.Errorf("database: drop partition %s: %w", name, err)
	}
	return rows, exists, nil
}

// countStep is how many rows countDetached counts per statement (a variable: tests make it
// small to cross steps).
var countStep = 20000

// countDetached counts the rows of the detached day partition name: countStep at a time in
// the order of its primary key (tenant_id, id, …), each statement on one core (no parallel
// workers), pausing after each as long as it took. Nothing writes into a detached table, so
// the steps add up to the exact count; paced so, counting takes at most about half of one
// core, where one count(*) of a busy day took a whole core and showed in ingestion's p99
// (bench -only prune). Each step starts from the last key of the one before on the primary
// key's index: ordered by id alone, every step read and sorted the whole day.
func countDetached(ctx context.Context, db *gorm.DB, name string) (int64, error) {
	var total int64
	var after *countKey
	for {
		start := time.Now()
		var step struct {
			N        int64
			TenantID *uint64
			ID       *string
		}
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Exec(`SET LOCAL max_parallel_workers_per_gather = 0`).Error; err != nil {
				return err
			}
			if err := tx.Exec(acrossTenants).Error; err != nil {
				return err
			}
			where, args := "", []any{countStep}
			if after != nil {
				where, args = "WHERE (tenant_id, id) > (?, ?)", []any{after.tenant, after.id, countStep}
			}
			return tx.Raw(fmt.Sprintf(`WITH s AS (SELECT tenant_id, id FROM %s %s ORDER BY tenant_id, id LIMIT ?)
				SELECT (SELECT count(*) FROM s) AS n, l.tenant_id, l.id
				FROM (SELECT tenant_id, id FROM s ORDER BY tenant_id DESC, id DESC LIMIT 1) l`, name, where), args...).
				Scan(&step).Error
		})
		if err != nil {
			return total, err
		}
		total += step.N
		if step.N < int64(countStep) || step.TenantID == nil || step.ID == nil {
			return total, nil
		}
		after = &countKey{*step.TenantID, *step.ID}
		select {
		case <-time.After(time.Since(start)):
		case <-ctx.Done():
			return total, ctx.Err()
		}
	}
}

// countKey is the primary key's prefix that countDetached resumes after.
type countKey struct {
	tenant uint64
	id     string
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// DetachedPartitions lists the day partitions' tables that are not attached to tracked_events
// (left by a DropPartition cut off between its two steps), oldest first.
func DetachedPartitions(ctx context.Context, db *gorm.DB) ([]Partition, error) {
	if !IsPostgres(db) {
		return nil, nil
	}
	var names []string
	err := db.WithContext(ctx).Raw(`SELECT c.relname FROM pg_class c
		WHERE c.relname LIKE ? AND c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
		AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid) ORDER BY c.relname`, partitionPrefix+"%").
		Scan(&names).Error
	if err != nil {
		return nil, fmt.Errorf("database: list detached partitions: %w", err)
	}
	return parsePartitions(names), nil
}

// partitionState tells whether the table name exists and whether it is attached.
func partitionState(tx *gorm.DB, name string) (exists, attached bool, err error) {
	var st struct{ Exists, Attached bool }
	err = tx.Raw(`SELECT true AS exists, EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid) AS attached
		FROM pg_class c WHERE c.relname = ? AND c.relnamespace = current_schema()::regnamespace`, name).Scan(&st).Error
	return st.Exists, st.Attached, err
}

// ddl runs f in a transaction that holds the maintenance advisory lock, with every lock wait
// bounded by DDLLockTimeout. A lock timeout rolls back and tries again after a pause, up to
// ddlAttempts times.
func ddl(ctx context.Context, db *gorm.DB, f func(tx *gorm.DB) error) error {
	var err error
	for attempt := 0; attempt < ddlAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(DDLLockTimeout):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err = db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			// Another process's maintenance holds this lock only for its own bounded DDL.
			if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", maintenanceLock).Error; err != nil {
				return err
			}
			if err := tx.Exec(fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", DDLLockTimeout.Milliseconds())).Error; err != nil {
				return err
			}
			// Partitions hold every tenant's rows (AcrossTenants).
			if err := tx.Exec(acrossTenants).Error; err != nil {
				return err
			}
			return f(tx)
		})
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" { // lock_not_available
			return err
		}
	}
	return err
}

func tableExists(tx *gorm.DB, name string) (bool, error) {
	var n int64
	err := tx.Raw(`SELECT count(*) FROM pg_class WHERE relname = ? AND relnamespace = current_schema()::regnamespace`, name).Scan(&n).Error
	return n > 0, err
}
