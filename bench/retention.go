package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/retention"
	"github.com/eventq/eventq/models"
)

// Retention is scenario 11, stored events that stay bounded (issue 19): ingestion while a
// prune deletes old days against the same ingestion without one, on Postgres (day partitions
// dropped) and SQLite (batched deletes); dropping a day partition against DELETE of an
// identical day; inserts into the partitioned table against an unpartitioned copy;
// events export; and the migration of an unpartitioned database.
type Retention struct {
	Prune        []*PruneUnderLoad  `json:"prune_under_load"`
	DropVsDelete *DropVsDelete      `json:"drop_vs_delete"`
	Insert       *PartitionedInsert `json:"partitioned_insert"`
	Export       []*ExportRun       `json:"export"`
	Migration    *MigrationCost     `json:"migration"`
	NotMeasured  []string           `json:"not_measured,omitempty"`
}

// retentionPlan is how large and how long the retention scenario runs.
type retentionPlan struct {
	rate          float64       // offered POST /api/track requests/s, 1 event each
	loadFor       time.Duration // the first run without a prune; the others last as long as the run with one
	lead          time.Duration // load before the prune starts
	tail          time.Duration // load after the prune returns
	maxFor        time.Duration // the run with a prune stops sending after this
	pruneDays     int           // old days filled for each prune
	perDay        int           // events per pruned day, Postgres
	sqlitePerDay  int           // events per pruned day, SQLite
	dropRows      int           // events of the day dropped, and of the day deleted
	exportRows    int           // events of the large export; the small one has exportSmall
	migrateRows   int           // events of the unpartitioned database migrated
	migrateDays   int           // days they span
	insertFor     time.Duration // each insert-rate measure
	insertTurns   int           // turns of partitioned / unpartitioned, the best of each counts
	insertConns   int
	insertBatch   int
	pruneKeepDays int
}

// exportSmall is the small export tenant's events: its peak RSS is the one the large
// export's is compared with.
const exportSmall = 10_000

var (
	fullRetention = retentionPlan{
		rate: 1000, loadFor: 10 * time.Second, lead: 2 * time.Second, tail: 2 * time.Second, maxFor: 3 * time.Minute,
		pruneDays: 3, perDay: 400_000, sqlitePerDay: 334_000, dropRows: 1_000_000,
		exportRows: 1_000_000, migrateRows: 1_000_000, migrateDays: 30,
		insertFor: 3 * time.Second, insertTurns: 2, insertConns: 8, insertBatch: 100, pruneKeepDays: 3,
	}
	quickRetention = retentionPlan{
		rate: 1000, loadFor: 2 * time.Second, lead: 500 * time.Millisecond, tail: 500 * time.Millisecond, maxFor: 30 * time.Second,
		pruneDays: 3, perDay: 20_000, sqlitePerDay: 20_000, dropRows: 100_000,
		exportRows: 100_000, migrateRows: 200_000, migrateDays: 30,
		insertFor: 300 * time.Millisecond, insertTurns: 1, insertConns: 8, insertBatch: 100, pruneKeepDays: 3,
	}
)

// PruneUnderLoad is ingestion at a fixed offered rate while a prune deletes old days, beside
// the same ingestion without a prune, before and after it.
type PruneUnderLoad struct {
	Database          string  `json:"database"`
	Method            string  `json:"method"`
	RequestsPerSec    float64 `json:"offered_requests_per_second"` // 1 event each
	Filled            int64   `json:"events_in_pruned_days"`
	FillEventsPerSec  float64 `json:"fill_events_per_second"`
	Deleted           int64   `json:"deleted"`
	PartitionsDropped int     `json:"partitions_dropped"`
	PruneSeconds      float64 `json:"prune_seconds"`
	// Alone are the runs without a prune, before and after the run with one.
	Alone  []LoadRun `json:"alone"`
	During LoadRun   `json:"during_prune"`
	// Window is the requests due from the prune's start to a second after its end.
	Window      Latency `json:"prune_window"`
	BaselineP99 float64 `json:"baseline_p99_ms"` // the lower of the alone runs' p99
	P99Ratio    float64 `json:"p99_ratio"`       // During.Latency.P99 ÷ BaselineP99
	TargetRatio float64 `json:"target_p99_ratio_max"`
	Met         bool    `json:"met"` // ratio within the target and nothing failed or dropped
	// The SQLite file (with its WAL) before the prune and after it.
	FileMiBBefore float64 `json:"file_mib_before,omitempty"`
	FileMiBAfter  float64 `json:"file_mib_after,omitempty"`
	// BytesPerEvent is the storage of the filled days, indexes included, per event: their
	// partitions on Postgres, the whole file on SQLite.
	BytesPerEvent float64 `json:"stored_bytes_per_event"`
}

// LoadRun is one open-loop run of POST /api/track.
type LoadRun struct {
	Seconds      float64 `json:"seconds"`
	Due          int     `json:"due"`
	OK           int     `json:"ok"`
	Failed       int     `json:"failed"`
	Dropped      int     `json:"dropped"`
	EventsPerSec float64 `json:"events_per_second"`
	Latency      Latency `json:"latency"`
}

func loadRunOf(r loadResult, d time.Duration) LoadRun {
	return LoadRun{Seconds: d.Seconds(), Due: r.Due, OK: r.OK, Failed: r.Failed, Dropped: r.Dropped,
		EventsPerSec: min(r.Achieved, r.Offered), Latency: summarize(r.Lat)}
}

// DropVsDelete is the time to drop a day partition against the time to DELETE an identical
// day's rows, on Postgres.
type DropVsDelete struct {
	Rows          int64   `json:"rows_per_day"`
	DropSeconds   float64 `json:"drop_seconds"`
	DeleteSeconds float64 `json:"delete_seconds"`
	Ratio         float64 `json:"ratio"` // drop ÷ delete
	// VacuumSeconds is the VACUUM of the deleted day's partition that the DELETE leaves to do
	// before its space can be reused.
	VacuumSeconds float64 `json:"vacuum_after_delete_seconds"`
}

// PartitionedInsert is the multi-row insert rate into tracked_events (partitioned by day)
// against an unpartitioned table of the same columns and indexes, in turns; optionally with
// an extra index on created_at, BRIN or B-tree.
type PartitionedInsert struct {
	Conns         int       `json:"connections"`
	RowsPerInsert int       `json:"rows_per_insert"`
	Partitioned   []float64 `json:"partitioned_rows_per_second"`
	Unpartitioned []float64 `json:"unpartitioned_rows_per_second"`
	Ratio         float64   `json:"ratio"` // best partitioned ÷ best unpartitioned
	Target        float64   `json:"target_ratio_min"`
	Met           bool      `json:"met"`
	WithBRIN      float64   `json:"partitioned_with_brin_created_at_rows_per_second"`
	WithBTree     float64   `json:"partitioned_with_btree_created_at_rows_per_second"`
}

// ExportRun is one eventq events export of a tenant.
type ExportRun struct {
	Format       string  `json:"format"`
	Events       int     `json:"events"`
	Destination  string  `json:"destination"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_second"`
	PeakRSSMiB   float64 `json:"peak_rss_mib"` // the child's rusage maxrss
}

// MigrationCost is database.Migrate on a database of the previous version with its
// unpartitioned tracked_events filled.
type MigrationCost struct {
	From              string  `json:"from_migration"`
	Rows              int64   `json:"rows"`
	Days              int     `json:"days"`
	Seconds           float64 `json:"seconds"`
	SecondsPerMillion float64 `json:"seconds_per_million_rows"`
	RowsAfter         int64   `json:"rows_after"`
	Partitions        int     `json:"day_partitions_after"`
}

// previousVersion is the last migration of the version before day partitions.
const previousVersion = "2026112302_payments_recovery"

// benchRetention runs the retention scenario: on its own Postgres database with an api and a
// worker, then on its own SQLite file.
func benchRetention(ctx context.Context, s *stack, rp retentionPlan) (*Retention, error) {
	res := &Retention{}
	url, err := s.postgresDatabase("retention")
	if err != nil {
		return nil, err
	}
	if err := s.startServices(ctx, url); err != nil {
		return nil, err
	}
	err = benchRetentionPostgres(ctx, s, rp, res)
	s.stopServices()
	if err != nil {
		return nil, err
	}
	s.logf("retention: migration of an unpartitioned database of %d events", rp.migrateRows)
	if res.Migration, err = benchMigration(ctx, s, rp); err != nil {
		return nil, err
	}

	if err := s.startServices(ctx, s.sqliteDatabase("retention")); err != nil {
		return nil, err
	}
	defer s.stopServices()
	pr, err := benchPruneUnderLoad(ctx, s, rp, rp.sqlitePerDay)
	if err != nil {
		return nil, err
	}
	res.Prune = append(res.Prune, pr)
	return res, nil
}

func benchRetentionPostgres(ctx context.Context, s *stack, rp retentionPlan, res *Retention) error {
	pr, err := benchPruneUnderLoad(ctx, s, rp, rp.perDay)
	if err != nil {
		return err
	}
	res.Prune = append(res.Prune, pr)
	s.logf("retention: drop a day partition of %d events vs DELETE of an identical day", rp.dropRows)
	if res.DropVsDelete, err = benchDropVsDelete(ctx, s, rp); err != nil {
		return err
	}
	s.logf("retention: inserts into the partitioned table vs an unpartitioned copy (%s each, %d turns)", rp.insertFor, rp.insertTurns)
	if res.Insert, err = benchPartitionedInsert(ctx, s, rp); err != nil {
		return err
	}
	s.logf("retention: events export of %d and %d events, jsonl and parquet", exportSmall, rp.exportRows)
	res.Export, err = benchExport(ctx, s, rp)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		s.logf("  export not measured: %v", err)
		res.NotMeasured = append(res.NotMeasured, "export: "+err.Error())
	}
	return nil
}

// benchPruneUnderLoad fills rp.pruneDays old days with perDay events each, then runs the
// ingestion alone, with a prune (Keep rp.pruneKeepDays) that deletes those days starting
// rp.lead into it, and alone again.
func benchPruneUnderLoad(ctx context.Context, s *stack, rp retentionPlan, perDay int) (*PruneUnderLoad, error) {
	postgres := strings.HasPrefix(s.dbURL, "postgres")
	res := &PruneUnderLoad{Database: "sqlite", Method: "DELETE in transactions of 500 rows, pausing between, then incremental_vacuum",
		RequestsPerSec: rp.rate, TargetRatio: 1.1}
	if postgres {
		res.Database, res.Method = "postgres", "DROP of day partitions"
	}
	loadTenant, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return nil, err
	}
	oldTenant, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	newest := database.Day(now).AddDate(0, 0, -10)
	oldest := newest.AddDate(0, 0, -(rp.pruneDays - 1))
	s.logf("retention %s: filling %d days × %d events, %s to %s", res.Database, rp.pruneDays, perDay,
		oldest.Format("2006-01-02"), newest.Format("2006-01-02"))
	started := time.Now()
	for day := oldest; !day.After(newest); day = day.AddDate(0, 0, 1) {
		if err := fillDay(ctx, s, oldTenant.ID, perDay, day); err != nil {
			return nil, err
		}
	}
	res.FillEventsPerSec = float64(rp.pruneDays*perDay) / time.Since(started).Seconds()
	if err := s.db.WithContext(ctx).Model(&models.TrackedEvent{}).Where("created_at < ?", newest.AddDate(0, 0, 1)).
		Count(&res.Filled).Error; err != nil {
		return nil, err
	}
	if err := settleFilled(ctx, s); err != nil {
		return nil, err
	}
	if !postgres {
		res.FileMiBBefore = sqliteFileMiB(s.dbURL)
		res.BytesPerEvent = res.FileMiBBefore * (1 << 20) / float64(res.Filled)
	} else {
		var bytes int64
		err := s.db.WithContext(ctx).Raw(`SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
			WHERE c.relname >= ? AND c.relname <= ? AND c.relkind = 'r'`, database.PartitionName(oldest), database.PartitionName(newest)).
			Scan(&bytes).Error
		if err != nil {
			return nil, err
		}
		res.BytesPerEvent = float64(bytes) / float64(res.Filled)
	}

	bodies := trackBodies(loadTenant.SiteKey, 1, 64)
	post := func(ctx context.Context, i int) error {
		req := s.request(ctx, "POST", "/api/track", "", bodies[i%len(bodies)])
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", userAgent)
		return expect(s.http, req, 202)
	}
	alone := func(d time.Duration) error {
		r := openLoop{Rate: rp.rate, N: int(rp.rate * d.Seconds()), MaxInFlight: 1024, Do: post}.run(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		run := loadRunOf(r, d)
		res.Alone = append(res.Alone, run)
		s.logf("  %s alone: %.0f req/s for %.1fs, %.0f events/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d failed, %d dropped",
			res.Database, rp.rate, d.Seconds(), run.EventsPerSec, run.Latency.P50, run.Latency.P99, run.Latency.Max, run.Failed, run.Dropped)
		s.rdb.Del(ctx, eventqueue.Key(loadTenant.ID))
		return sleepCtx(ctx, 500*time.Millisecond)
	}
	if err := alone(rp.loadFor); err != nil {
		return nil, err
	}

	// With the prune: the load is sent until the prune has returned and rp.tail more, and at
	// least rp.loadFor; requests already sent are answered whatever happens to the sending.
	pruner := &retention.Pruner{DB: s.db, Keep: time.Duration(rp.pruneKeepDays) * 24 * time.Hour, Clock: clock.Real{}}
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	var (
		pruneRes        retention.Result
		pruneErr        error
		pruneAt, pruned time.Duration
		done            = make(chan struct{})
	)
	start := time.Now()
	go func() {
		defer close(done)
		if sleepCtx(sendCtx, rp.lead) != nil {
			pruneErr = sendCtx.Err()
			return
		}
		pruneAt = time.Since(start)
		pruneRes, pruneErr = pruner.Prune(ctx, time.Now(), false)
		pruned = time.Since(start)
		sleepCtx(sendCtx, max(rp.tail, rp.loadFor-pruned))
		stopSending()
	}()
	r := openLoop{Rate: rp.rate, N: int(rp.rate * rp.maxFor.Seconds()), MaxDuration: rp.maxFor, MaxInFlight: 1024,
		Do: func(_ context.Context, i int) error { return post(ctx, i) }}.run(sendCtx)
	<-done
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pruneErr != nil {
		return nil, fmt.Errorf("retention %s: prune: %w", res.Database, pruneErr)
	}
	sent := time.Duration(float64(r.Due) / rp.rate * float64(time.Second))
	res.During = loadRunOf(r, sent)
	res.Deleted, res.PartitionsDropped, res.PruneSeconds = pruneRes.Deleted, pruneRes.PartitionsDropped, (pruned - pruneAt).Seconds()
	var window []time.Duration
	for i, at := range r.DueAt {
		if at >= pruneAt && at < pruned+time.Second {
			window = append(window, r.Lat[i])
		}
	}
	res.Window = summarize(window)
	s.logf("  %s with the prune: %.1fs, %.0f events/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d failed, %d dropped; "+
		"prune %.2fs deleted %d (%d partitions), p99 in its window %.1f ms",
		res.Database, sent.Seconds(), res.During.EventsPerSec, res.During.Latency.P50, res.During.Latency.P99, res.During.Latency.Max,
		res.During.Failed, res.During.Dropped, res.PruneSeconds, res.Deleted, res.PartitionsDropped, res.Window.P99)
	s.rdb.Del(ctx, eventqueue.Key(loadTenant.ID))
	if !postgres { // the file as the prune left it, its WAL written back
		if err := quiesce(ctx, s); err != nil {
			return nil, err
		}
		res.FileMiBAfter = sqliteFileMiB(s.dbURL)
	}
	if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
		return nil, err
	}
	if err := alone(sent); err != nil {
		return nil, err
	}
	res.BaselineP99 = min(res.Alone[0].Latency.P99, res.Alone[1].Latency.P99)
	if res.BaselineP99 > 0 {
		res.P99Ratio = res.During.Latency.P99 / res.BaselineP99
	}
	res.Met = res.P99Ratio <= res.TargetRatio && res.During.Failed == 0 && res.During.Dropped == 0
	return res, nil
}

// quiesce flushes what the fill left to write, so that it does not land in a measurement: a
// checkpoint on Postgres, the WAL into the file on SQLite.
func quiesce(ctx context.Context, s *stack) error {
	q := "PRAGMA wal_checkpoint(TRUNCATE)"
	if strings.HasPrefix(s.dbURL, "postgres") {
		q = "CHECKPOINT"
	}
	return s.db.WithContext(ctx).Exec(q).Error
}

// settleFilled is quiesce after days were filled that a prune or a drop is about to remove. On
// Postgres those days are vacuumed first, as days that old are in production: left to
// autovacuum, it would still be working on them when the prune comes, and its lock on a
// partition outlasts the prune's lock timeout (Postgres cancels an autovacuum that is in the
// way only after deadlock_timeout, 1 s), so the prune would give up (2026-11-25 run).
func settleFilled(ctx context.Context, s *stack) error {
	if strings.HasPrefix(s.dbURL, "postgres") {
		if err := s.db.WithContext(ctx).Exec("VACUUM (ANALYZE) " + database.EventsTable).Error; err != nil {
			return err
		}
	}
	return quiesce(ctx, s)
}

// sqliteFileMiB is the size of the SQLite database file with its WAL, in MiB.
func sqliteFileMiB(url string) float64 {
	path := strings.TrimPrefix(url, "sqlite://")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	total := int64(0)
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			total += fi.Size()
		}
	}
	return float64(total) / (1 << 20)
}

// fillDay stores n events of tenantID created over the UTC day that starts at day, into the
// database the services run on: COPY into its partition (created first) on Postgres, 50-row
// inserts in transactions of 10,000 rows on SQLite.
func fillDay(ctx context.Context, s *stack, tenantID uint64, n int, day time.Time) error {
	return fillEvents(ctx, s.dbURL, s.db, tenantID, n, day, day.AddDate(0, 0, 1))
}

// fillEvents stores n events of tenantID with created_at spread evenly over [from, to).
func fillEvents(ctx context.Context, url string, db *gorm.DB, tenantID uint64, n int, from, to time.Time) error {
	if strings.HasPrefix(url, "postgres") {
		if _, err := database.EnsurePartitions(ctx, db, from, to.Add(-time.Nanosecond)); err != nil {
			return err
		}
		return copyEvents(ctx, url, "tracked_events", tenantID, n, from, to)
	}
	return sqliteFill(ctx, url, tenantID, n, from, to)
}

// eventAt returns the values of event i as rowValues does, created at at, with a UUID v7 of
// that time.
func eventAt(args []any, tenantID uint64, i int, at time.Time) []any {
	args = rowValues(args, tenantID, i%1_000_000, at)
	u := uuid.Must(uuid.NewV7())
	ms := uint64(at.UnixMilli())
	for b := range 6 {
		u[b] = byte(ms >> (40 - 8*b))
	}
	args[len(args)-13] = u.String()
	return args
}

// copyEvents COPYs n events into table on Postgres.
func copyEvents(ctx context.Context, url, table string, tenantID uint64, n int, from, to time.Time) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	cols := strings.Split(trackedColumns, ", ")
	step := to.Sub(from) / time.Duration(n)
	i := 0
	_, err = c.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		row := eventAt(make([]any, 0, 13), tenantID, i, from.Add(time.Duration(i)*step))
		i++
		return row, nil
	}))
	if err != nil {
		return fmt.Errorf("copy %d events into %s: %w", n, table, err)
	}
	return nil
}

// sqliteFill inserts n events (rounded up to 50) on SQLite, in 50-row inserts, 10,000 rows a
// transaction.
func sqliteFill(ctx context.Context, url string, tenantID uint64, n int, from, to time.Time) error {
	gdb, err := database.Open(url)
	if err != nil {
		return err
	}
	defer database.Close(gdb)
	db, err := gdb.DB()
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	const batch, perTx = 50, 10_000
	step := to.Sub(from) / time.Duration(n)
	q := insertSQL(batch, false)
	args := make([]any, 0, 13*batch)
	for done := 0; done < n; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, q)
		if err != nil {
			tx.Rollback()
			return err
		}
		for k := 0; k < perTx && done < n; k += batch {
			args = args[:0]
			for r := range batch {
				args = eventAt(args, tenantID, done+r, from.Add(time.Duration(min(done+r, n-1))*step))
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				tx.Rollback()
				return fmt.Errorf("sqlite fill: %w", err)
			}
			done += batch
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// benchDropVsDelete fills two old days with rp.dropRows events each, drops the first's
// partition and DELETEs the second's rows.
func benchDropVsDelete(ctx context.Context, s *stack, rp retentionPlan) (*DropVsDelete, error) {
	t, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return nil, err
	}
	dropDay := database.Day(time.Now()).AddDate(0, 0, -20)
	deleteDay := dropDay.AddDate(0, 0, -1)
	for _, day := range []time.Time{dropDay, deleteDay} {
		if err := fillDay(ctx, s, t.ID, rp.dropRows, day); err != nil {
			return nil, err
		}
	}
	res := &DropVsDelete{}
	if err := s.db.WithContext(ctx).Raw("SELECT count(*) FROM " + database.PartitionName(dropDay)).Scan(&res.Rows).Error; err != nil {
		return nil, err
	}
	var deleteRows int64
	if err := s.db.WithContext(ctx).Raw("SELECT count(*) FROM " + database.PartitionName(deleteDay)).Scan(&deleteRows).Error; err != nil {
		return nil, err
	}
	if deleteRows != res.Rows {
		return nil, fmt.Errorf("drop vs delete: the days hold %d and %d rows", res.Rows, deleteRows)
	}
	if err := settleFilled(ctx, s); err != nil {
		return nil, err
	}
	start := time.Now()
	_, dropped, err := database.DropPartition(ctx, s.db, database.PartitionName(dropDay))
	if err != nil {
		return nil, err
	}
	if !dropped {
		return nil, fmt.Errorf("drop vs delete: %s was not dropped", database.PartitionName(dropDay))
	}
	res.DropSeconds = time.Since(start).Seconds()
	if err := quiesce(ctx, s); err != nil {
		return nil, err
	}
	start = time.Now()
	del := s.db.WithContext(ctx).Exec("DELETE FROM tracked_events WHERE created_at >= ? AND created_at < ?", deleteDay, deleteDay.AddDate(0, 0, 1))
	if del.Error != nil {
		return nil, del.Error
	}
	res.DeleteSeconds = time.Since(start).Seconds()
	if del.RowsAffected != res.Rows {
		return nil, fmt.Errorf("drop vs delete: DELETE removed %d rows, want %d", del.RowsAffected, res.Rows)
	}
	res.Ratio = res.DropSeconds / res.DeleteSeconds
	start = time.Now()
	if err := s.db.WithContext(ctx).Exec("VACUUM " + database.PartitionName(deleteDay)).Error; err != nil {
		return nil, err
	}
	res.VacuumSeconds = time.Since(start).Seconds()
	s.logf("  drop %d rows: %.3fs; DELETE %d rows: %.2fs (%.4f×), then VACUUM %.2fs",
		res.Rows, res.DropSeconds, del.RowsAffected, res.DeleteSeconds, res.Ratio, res.VacuumSeconds)
	if _, _, err := database.DropPartition(ctx, s.db, database.PartitionName(deleteDay)); err != nil { // its dead rows
		return nil, err
	}
	return res, nil
}

// flatTable is the unpartitioned copy of tracked_events: the columns, primary key and indexes
// of the table before day partitions.
const flatTable = "tracked_events_flat"

// benchPartitionedInsert measures multi-row inserts of today's events into tracked_events and
// into flatTable, in turns, then into tracked_events with an extra BRIN, then B-tree, index
// on created_at.
func benchPartitionedInsert(ctx context.Context, s *stack, rp retentionPlan) (*PartitionedInsert, error) {
	t, err := s.seedTenant(ctx, "", false)
	if err != nil {
		return nil, err
	}
	exec := func(q string) error { return s.db.WithContext(ctx).Exec(q).Error }
	for _, q := range []string{
		"CREATE TABLE " + flatTable + " (LIKE tracked_events INCLUDING DEFAULTS)",
		"ALTER TABLE " + flatTable + " ADD PRIMARY KEY (id)",
		"CREATE INDEX " + flatTable + "_tenant_created ON " + flatTable + " (tenant_id, created_at)",
		"CREATE INDEX idx_" + flatTable + "_queue_pending ON " + flatTable + " (queue_pending)",
	} {
		if err := exec(q); err != nil {
			return nil, err
		}
	}
	res := &PartitionedInsert{Conns: rp.insertConns, RowsPerInsert: rp.insertBatch, Target: 0.95}
	rate := func(table string) (float64, error) {
		if err := quiesce(ctx, s); err != nil {
			return 0, err
		}
		return postgresInsertRate(ctx, s.dbURL, table, t.ID, rp.insertBatch, rp.insertConns, rp.insertFor)
	}
	for turn := range rp.insertTurns {
		p, err := rate("tracked_events")
		if err != nil {
			return nil, err
		}
		f, err := rate(flatTable)
		if err != nil {
			return nil, err
		}
		res.Partitioned, res.Unpartitioned = append(res.Partitioned, p), append(res.Unpartitioned, f)
		s.logf("  turn %d: partitioned %.0f rows/s, unpartitioned %.0f rows/s", turn+1, p, f)
	}
	res.Ratio = maxOf(res.Partitioned) / maxOf(res.Unpartitioned)
	res.Met = res.Ratio >= res.Target
	for _, ix := range []struct {
		using string
		dst   *float64
	}{{"brin", &res.WithBRIN}, {"btree", &res.WithBTree}} {
		if err := exec("CREATE INDEX tracked_events_created_extra ON tracked_events USING " + ix.using + " (created_at)"); err != nil {
			return nil, err
		}
		if *ix.dst, err = rate("tracked_events"); err != nil {
			return nil, err
		}
		if err := exec("DROP INDEX tracked_events_created_extra"); err != nil {
			return nil, err
		}
	}
	s.logf("  with an extra index on created_at: BRIN %.0f rows/s, B-tree %.0f rows/s", res.WithBRIN, res.WithBTree)
	return res, exec("DROP TABLE " + flatTable)
}

// benchExport builds the eventq CLI and runs events export, jsonl and parquet, of a tenant
// with exportSmall events and of one with rp.exportRows: the small ones into files that are
// checked, the large ones into /dev/null.
func benchExport(ctx context.Context, s *stack, rp retentionPlan) ([]*ExportRun, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", s.binDir+"/", "./cmd/eventq")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/eventq: %v: %s", err, bytes.TrimSpace(out))
	}
	bin := filepath.Join(s.binDir, "eventq")
	day := database.Day(time.Now()).AddDate(0, 0, -2)
	var tenants []*tenant
	for _, n := range []int{exportSmall, rp.exportRows} {
		t, err := s.seedTenant(ctx, "", false)
		if err != nil {
			return nil, err
		}
		if err := fillEvents(ctx, s.dbURL, s.db, t.ID, n, day, day.AddDate(0, 0, 2)); err != nil {
			return nil, err
		}
		tenants = append(tenants, t)
	}
	if err := quiesce(ctx, s); err != nil {
		return nil, err
	}
	var out []*ExportRun
	for _, format := range []string{"jsonl", "parquet"} {
		for i, n := range []int{exportSmall, rp.exportRows} {
			dest := os.DevNull
			if i == 0 {
				dest = filepath.Join(s.dir, "export."+format)
			}
			r, err := runExport(ctx, s, bin, tenants[i].ID, format, n, dest)
			if err != nil {
				return out, err
			}
			if i == 0 {
				if err := checkExport(dest, format, n); err != nil {
					return out, err
				}
			}
			s.logf("  export %s of %d events: %.2fs, %.0f events/s, peak RSS %.1f MiB", format, n, r.Seconds, r.EventsPerSec, r.PeakRSSMiB)
			out = append(out, r)
		}
	}
	return out, nil
}

func runExport(ctx context.Context, s *stack, bin string, tenantID uint64, format string, n int, dest string) (*ExportRun, error) {
	f, err := os.Create(dest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, bin, "events", "export", "--tenant", strconv.FormatUint(tenantID, 10), "--format", format)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+s.dbURL, "REDIS_URL="+s.redisURL)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("eventq events export --format %s: %v: %s", format, err, bytes.TrimSpace(stderr.Bytes()))
	}
	d := time.Since(start)
	r := &ExportRun{Format: format, Events: n, Destination: dest, Seconds: d.Seconds(), EventsPerSec: float64(n) / d.Seconds()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	if dest != os.DevNull {
		r.Destination = "file"
	}
	return r, nil
}

// checkExport checks that an export file holds n events: n lines of JSON, or a Parquet file.
func checkExport(path, format string, n int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if format == "parquet" {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(b) < 8 || string(b[:4]) != "PAR1" || string(b[len(b)-4:]) != "PAR1" {
			return fmt.Errorf("export parquet: %d bytes, not a Parquet file", len(b))
		}
		return nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		if lines == 0 && !strings.HasPrefix(sc.Text(), "{") {
			return fmt.Errorf("export jsonl: the first line is not JSON: %.80q", sc.Text())
		}
		lines++
	}
	if lines != n {
		return fmt.Errorf("export jsonl: %d lines, want %d", lines, n)
	}
	return sc.Err()
}

// benchMigration creates a database of the previous version on the bench's Postgres, fills
// its unpartitioned tracked_events with rp.migrateRows events over rp.migrateDays days, and
// times database.Migrate.
func benchMigration(ctx context.Context, s *stack, rp retentionPlan) (*MigrationCost, error) {
	const name = "retention_migrate"
	url, err := s.postgresDatabase(name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if c, err := pgx.Connect(context.Background(), s.pg.URL("postgres")); err == nil {
			c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name)
			c.Close(context.Background())
		}
	}()
	db, err := database.Open(url)
	if err != nil {
		return nil, err
	}
	defer database.Close(db)
	if err := database.MigrateTo(db.WithContext(ctx), previousVersion); err != nil {
		return nil, err
	}
	t := models.Tenant{Name: "Bench migrate", SiteKey: "site_bench_migrate"}
	// Only the columns the previous version's table has.
	if err := db.WithContext(ctx).Select("name", "site_key", "created_at", "updated_at").Create(&t).Error; err != nil {
		return nil, err
	}
	res := &MigrationCost{From: previousVersion, Days: rp.migrateDays}
	to := time.Now().UTC()
	if err := copyEvents(ctx, url, "tracked_events", t.ID, rp.migrateRows, to.AddDate(0, 0, -rp.migrateDays), to); err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).Raw("SELECT count(*) FROM tracked_events").Scan(&res.Rows).Error; err != nil {
		return nil, err
	}
	if err := db.WithContext(ctx).Exec("CHECKPOINT").Error; err != nil {
		return nil, err
	}
	start := time.Now()
	if err := database.Migrate(db.WithContext(ctx)); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.SecondsPerMillion = res.Seconds / (float64(res.Rows) / 1e6)
	if err := db.WithContext(ctx).Raw("SELECT count(*) FROM tracked_events").Scan(&res.RowsAfter).Error; err != nil {
		return nil, err
	}
	parts, err := database.Partitions(ctx, db)
	if err != nil {
		return nil, err
	}
	res.Partitions = len(parts)
	if res.RowsAfter != res.Rows {
		return nil, fmt.Errorf("migration: %d rows before, %d after", res.Rows, res.RowsAfter)
	}
	s.logf("  migrated %d rows in %.2fs (%.1f s per million), %d day partitions", res.Rows, res.Seconds, res.SecondsPerMillion, res.Partitions)
	return res, nil
}

// rows adds the scenario's lines to the table.
func (r *Retention) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	f := func(v float64) *float64 { return &v }
	b := func(v bool) *bool { return &v }
	for _, p := range r.Prune {
		name := fmt.Sprintf("prune %s, %s events, %.0f req/s", p.Database, count(p.Filled), p.RequestsPerSec)
		add(name, "ingest p99 ms during prune (floor: alone, better of 2)", p.During.Latency.P99, f(p.BaselineP99), f(p.P99Ratio),
			fmt.Sprintf("≤ %.1f×", p.TargetRatio), b(p.P99Ratio <= p.TargetRatio))
		if len(p.Alone) > 1 { // how much two runs without a prune differ: the noise of the ratio above
			add(name, "ingest p99 ms alone, after (beside: before)", p.Alone[1].Latency.P99, f(p.Alone[0].Latency.P99),
				f(p.Alone[1].Latency.P99/p.Alone[0].Latency.P99), "", nil)
		}
		add(name, "ingest failed + dropped during prune", float64(p.During.Failed+p.During.Dropped), nil, nil, "0",
			b(p.During.Failed+p.During.Dropped == 0))
		alone := p.Alone[0].EventsPerSec
		if len(p.Alone) > 1 {
			alone = max(alone, p.Alone[1].EventsPerSec)
		}
		add(name, "ingest events/s during prune (beside: alone)", p.During.EventsPerSec, f(alone), f(p.During.EventsPerSec/alone), "", nil)
		maxAlone := p.Alone[0].Latency.Max
		if len(p.Alone) > 1 {
			maxAlone = min(maxAlone, p.Alone[1].Latency.Max)
		}
		add(name, "ingest p99 ms while the prune ran +1 s (beside: alone)", p.Window.P99, f(p.BaselineP99), f(p.Window.P99/p.BaselineP99), "", nil)
		add(name, "ingest max ms during prune (beside: alone)", p.During.Latency.Max, f(maxAlone), f(p.During.Latency.Max/maxAlone), "", nil)
		add(name, fmt.Sprintf("prune seconds (%s)", p.Method), p.PruneSeconds, nil, nil, "", nil)
		add(name, "stored bytes per event, indexes included", p.BytesPerEvent, nil, nil, "", nil)
		add(name, "events deleted (beside: in the pruned days)", float64(p.Deleted), f(float64(p.Filled)), f(float64(p.Deleted)/float64(p.Filled)), "", nil)
		if p.Database == "sqlite" {
			add(name, "database file MiB after prune (beside: before)", p.FileMiBAfter, f(p.FileMiBBefore), f(p.FileMiBAfter/p.FileMiBBefore), "", nil)
		}
	}
	if d := r.DropVsDelete; d != nil {
		name := fmt.Sprintf("drop a day of %s events, postgres", count(d.Rows))
		add(name, "drop partition s (beside: DELETE the same day)", d.DropSeconds, f(d.DeleteSeconds), f(d.Ratio), "", nil)
		both := d.DeleteSeconds + d.VacuumSeconds
		add(name, "drop partition s (beside: DELETE + its VACUUM)", d.DropSeconds, f(both), f(d.DropSeconds/both), "", nil)
	}
	if in := r.Insert; in != nil {
		name := fmt.Sprintf("insert partitioned, %d-row × %d conn", in.RowsPerInsert, in.Conns)
		add(name, "rows/s (floor: unpartitioned copy)", maxOf(in.Partitioned), f(maxOf(in.Unpartitioned)), f(in.Ratio),
			fmt.Sprintf("≥ %.2f×", in.Target), b(in.Met))
		add(name, "rows/s + BRIN(created_at) (beside: + B-tree)", in.WithBRIN, f(in.WithBTree), f(in.WithBRIN/in.WithBTree), "", nil)
		add(name, "rows/s + B-tree(created_at) (beside: no extra index)", in.WithBTree, f(maxOf(in.Partitioned)), f(in.WithBTree/maxOf(in.Partitioned)), "", nil)
	}
	var small, large = map[string]*ExportRun{}, map[string]*ExportRun{}
	for _, e := range r.Export {
		if e.Events == exportSmall {
			small[e.Format] = e
		} else {
			large[e.Format] = e
		}
	}
	for _, format := range []string{"jsonl", "parquet"} {
		l, sm := large[format], small[format]
		if l == nil || sm == nil {
			continue
		}
		name := fmt.Sprintf("export %s", format)
		add(name, fmt.Sprintf("events/s, %s events to /dev/null", count(int64(l.Events))), l.EventsPerSec, nil, nil, "", nil)
		add(name, fmt.Sprintf("peak RSS MiB, %s events (beside: %s)", count(int64(l.Events)), count(int64(sm.Events))), l.PeakRSSMiB, f(sm.PeakRSSMiB),
			f(l.PeakRSSMiB/sm.PeakRSSMiB), "", nil)
	}
	if m := r.Migration; m != nil {
		name := fmt.Sprintf("migrate unpartitioned, %s events", count(m.Rows))
		add(name, fmt.Sprintf("seconds per million rows (%d days)", m.Days), m.SecondsPerMillion, nil, nil, "", nil)
		add(name, "seconds", m.Seconds, nil, nil, "", nil)
	}
}

// count formats a number of events: 60k, 1.2M.
func count(n int64) string {
	if n >= 1_000_000 {
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	}
	return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
}
