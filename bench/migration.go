package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

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
