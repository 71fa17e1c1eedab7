package main

import (
	"context"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/database"
)

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
