// Package retention keeps the stored events bounded: it deletes the days older than the
// retention (EVENT_RETENTION) and, on Postgres, keeps the day partitions of tracked_events
// created ahead. It never touches the queues in Redis.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/models"
)

// DeleteBatch is the most rows one transaction deletes where rows are deleted one by one
// (SQLite, and rows in Postgres's default partition).
const DeleteBatch = 10000

// vacuumPages is how many free pages one SQLite incremental_vacuum step gives back: each step
// holds the write lock, so the space is returned in small steps between which ingestion writes.
const vacuumPages = 2048

// ErrOff is returned by Prune when no retention is configured.
var ErrOff = errors.New("EVENT_RETENTION is off: nothing to prune")

// Pruner applies the retention to the stored events. Its zero Keep means retention is off.
type Pruner struct {
	DB *gorm.DB
	// Keep is how long events are kept (EVENT_RETENTION); zero is off.
	Keep    time.Duration
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
}

// Result is what a prune deleted or, dry, would delete.
type Result struct {
	// Cutoff is the start of the oldest UTC day kept: every event created before it goes.
	Cutoff time.Time
	// Deleted counts the events deleted (or, dry, that would be).
	Deleted int64
	// PartitionsDropped counts the day partitions dropped (Postgres).
	PartitionsDropped int
}

// Cutoff is the start of the oldest UTC day kept at asOf with retention keep: a day goes once
// every moment of it is older than keep, so an event is kept at least keep and at most a day
// more.
func Cutoff(asOf time.Time, keep time.Duration) time.Time {
	return database.Day(asOf.Add(-keep))
}

// Prune deletes every stored event created before Cutoff(asOf, Keep) and none after: on
// Postgres it drops whole day partitions (and deletes the rows of those days that sit in the
// default partition), on SQLite it deletes in transactions of at most DeleteBatch rows and
// then gives the freed pages back to the file system. With dryRun it only counts. It is
// idempotent, and safe to run while events are ingested and from several processes at once.
func (p *Pruner) Prune(ctx context.Context, asOf time.Time, dryRun bool) (Result, error) {
	if p.Keep <= 0 {
		return Result{}, ErrOff
	}
	res := Result{Cutoff: Cutoff(asOf, p.Keep)}
	if dryRun {
		n, err := p.count(ctx, res.Cutoff)
		res.Deleted = n
		return res, err
	}
	parts, err := database.Partitions(ctx, p.DB)
	if err != nil {
		return res, err
	}
	for _, part := range parts {
		if part.Day.AddDate(0, 0, 1).After(res.Cutoff) {
			break // oldest first: this one and the rest are kept
		}
		var n int64
		if err := p.DB.WithContext(ctx).Raw("SELECT count(*) FROM " + part.Name).Scan(&n).Error; err != nil {
			return res, fmt.Errorf("retention: count %s: %w", part.Name, err)
		}
		dropped, err := database.DropPartition(ctx, p.DB, part.Name)
		if err != nil {
			return res, fmt.Errorf("retention: %w", err)
		}
		if dropped {
			res.Deleted += n
			res.PartitionsDropped++
			p.Metrics.Pruned(n, 1)
			p.log().Info("retention: dropped a day partition", "partition", part.Name, "events", n)
		}
	}
	n, err := p.deleteRows(ctx, res.Cutoff)
	res.Deleted += n
	p.Metrics.Pruned(n, 0)
	if err != nil {
		return res, err
	}
	if n > 0 && !database.IsPostgres(p.DB) {
		err = p.vacuum(ctx)
	}
	return res, err
}

// count counts the events created before cutoff, tenant by tenant on the
// (tenant_id, created_at) index.
func (p *Pruner) count(ctx context.Context, cutoff time.Time) (int64, error) {
	tenants, err := p.tenants(ctx)
	total := int64(0)
	for _, t := range tenants {
		var n int64
		err = p.DB.WithContext(ctx).Model(&models.TrackedEvent{}).
			Where("tenant_id = ? AND created_at < ?", t, cutoff.UTC()).Count(&n).Error
		if err != nil {
			return total, fmt.Errorf("retention: count: %w", err)
		}
		total += n
	}
	return total, err
}

// deleteRows deletes the events created before cutoff that are still stored, tenant by tenant
// on the (tenant_id, created_at) index, DeleteBatch rows per statement (and so per
// transaction). On Postgres, once the old partitions are dropped, only the default partition
// can hold such rows, and partition pruning confines the statements to it.
func (p *Pruner) deleteRows(ctx context.Context, cutoff time.Time) (int64, error) {
	// The outer created_at bound lets Postgres prune partitions for the DELETE itself too.
	stmt := "DELETE FROM tracked_events WHERE created_at < ? AND rowid IN " +
		"(SELECT rowid FROM tracked_events WHERE tenant_id = ? AND created_at < ? LIMIT ?)"
	if database.IsPostgres(p.DB) {
		stmt = "DELETE FROM tracked_events WHERE created_at < ? AND (id, created_at) IN " +
			"(SELECT id, created_at FROM tracked_events WHERE tenant_id = ? AND created_at < ? LIMIT ?)"
	}
	tenants, err := p.tenants(ctx)
	total := int64(0)
	for _, t := range tenants {
		for {
			res := p.DB.WithContext(ctx).Exec(stmt, cutoff.UTC(), t, cutoff.UTC(), DeleteBatch)
			if res.Error != nil {
				return total, fmt.Errorf("retention: delete: %w", res.Error)
			}
			total += res.RowsAffected
			if res.RowsAffected < DeleteBatch {
				break
			}
		}
	}
	return total, err
}

// vacuum gives the pages freed by deletes back to the file system, vacuumPages at a time
// (SQLite with auto_vacuum=INCREMENTAL; a database without it keeps its free pages for reuse).
func (p *Pruner) vacuum(ctx context.Context) error {
	for {
		var free int64
		if err := p.DB.WithContext(ctx).Raw("PRAGMA freelist_count").Scan(&free).Error; err != nil {
			return fmt.Errorf("retention: vacuum: %w", err)
		}
		if free == 0 {
			return nil
		}
		var mode int
		if err := p.DB.WithContext(ctx).Raw("PRAGMA auto_vacuum").Scan(&mode).Error; err != nil || mode != 2 {
			return err
		}
		if err := p.DB.WithContext(ctx).Exec(fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumPages)).Error; err != nil {
			return fmt.Errorf("retention: vacuum: %w", err)
		}
	}
}

// Maintain is the worker's periodic storage maintenance: on Postgres it creates the day
// partitions from yesterday to PartitionsAhead days after today, then, when retention is on,
// it prunes as of now. It records its outcome and the oldest stored event's age in the
// metrics.
func (p *Pruner) Maintain(ctx context.Context) (Result, error) {
	now := p.Clock.Now()
	res, err := p.maintain(ctx, now)
	var oldest time.Duration
	if err == nil {
		oldest, err = p.oldestAge(ctx, now)
	}
	p.Metrics.Maintained(err == nil, p.Clock.Now(), oldest)
	return res, err
}

func (p *Pruner) maintain(ctx context.Context, now time.Time) (Result, error) {
	if err := p.EnsureAhead(ctx, now); err != nil {
		return Result{}, err
	}
	if p.Keep <= 0 {
		return Result{}, nil
	}
	res, err := p.Prune(ctx, now, false)
	if err == nil && res.Deleted > 0 {
		p.log().Info("retention: pruned stored events", "cutoff", res.Cutoff, "events", res.Deleted, "partitions", res.PartitionsDropped)
	}
	return res, err
}

// EnsureAhead creates the missing day partitions from the day before now to PartitionsAhead
// days after it (Postgres; nothing to do on SQLite).
func (p *Pruner) EnsureAhead(ctx context.Context, now time.Time) error {
	day := database.Day(now)
	n, err := database.EnsurePartitions(ctx, p.DB, day.AddDate(0, 0, -1), day.AddDate(0, 0, database.PartitionsAhead))
	p.Metrics.PartitionsMade(n)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	return nil
}

// oldestAge is the age at now of the oldest stored event, zero when none is stored.
func (p *Pruner) oldestAge(ctx context.Context, now time.Time) (time.Duration, error) {
	tenants, err := p.tenants(ctx)
	var oldest time.Time
	for _, t := range tenants {
		var rows []models.TrackedEvent
		err = p.DB.WithContext(ctx).Select("created_at").Where("tenant_id = ?", t).
			Order("created_at").Limit(1).Find(&rows).Error
		if err != nil {
			return 0, fmt.Errorf("retention: oldest event: %w", err)
		}
		if len(rows) == 1 && (oldest.IsZero() || rows[0].CreatedAt.Before(oldest)) {
			oldest = rows[0].CreatedAt
		}
	}
	if oldest.IsZero() {
		return 0, err
	}
	return max(now.Sub(oldest), 0), err
}

// tenants lists every tenant's id: the stored events are reached tenant by tenant, on the
// (tenant_id, created_at) index.
func (p *Pruner) tenants(ctx context.Context) ([]uint64, error) {
	var ids []uint64
	if err := p.DB.WithContext(ctx).Model(&models.Tenant{}).Order("id").Pluck("id", &ids).Error; err != nil {
		return nil, fmt.Errorf("retention: list tenants: %w", err)
	}
	return ids, nil
}

func (p *Pruner) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}
