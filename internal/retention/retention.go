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
// (rows in Postgres's default partition; SQLite deletes in smaller steps, sqliteBatch).
const DeleteBatch = 10000

// SQLite has one writer for the whole database: while a prune step holds the write lock,
// every ingestion commit waits. So there a prune deletes sqliteBatch rows (a few milliseconds)
// per transaction, gives the freed pages back vacuumPages at a time, and after each step
// leaves the lock free for yieldFactor times as long as the step took (at least minYield), so
// that waiting writers get in. The prune takes longer; ingestion barely notices it.
const (
	sqliteBatch = 500
	vacuumPages = 64
	yieldFactor = 3
	minYield    = 2 * time.Millisecond
)

// ErrOff is returned by Prune when no retention is configured.
var ErrOff = errors.New("EVENT_RETENTION is off: nothing to prune (set it, e.g. EVENT_RETENTION=30d, to prune; make run leaves it off)")

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
// default partition), on SQLite it deletes in small transactions, letting ingestion's commits
// in between, and then gives the freed pages back to the file system. With dryRun it only counts. It is
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
	detached, err := database.DetachedPartitions(ctx, p.DB)
	if err != nil {
		return res, err
	}
	parts = append(detached, parts...) // a detached one is always older than the attached ones
	for _, part := range parts {
		if part.Day.AddDate(0, 0, 1).After(res.Cutoff) {
			continue // kept
		}
		n, dropped, err := database.DropPartition(ctx, p.DB, part.Name)
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
	start := time.Now()
	n, err := p.deleteRows(ctx, res.Cutoff)
	res.Deleted += n
	p.Metrics.Pruned(n, 0)
	p.log().Debug("retention: deleted rows", "events", n, "took", time.Since(start))
	if err != nil {
		return res, err
	}
	if n > 0 && !database.IsPostgres(p.DB) {
		start = time.Now()
		err = p.vacuum(ctx)
		p.log().Debug("retention: gave the free pages back", "took", time.Since(start))
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
	batch := sqliteBatch
	if database.IsPostgres(p.DB) {
		batch = DeleteBatch
	}
	tenants, err := p.tenants(ctx)
	total := int64(0)
	for _, t := range tenants {
		for {
			start := time.Now()
			res := p.DB.WithContext(ctx).Exec(stmt, cutoff.UTC(), t, cutoff.UTC(), batch)
			if res.Error != nil {
				return total, fmt.Errorf("retention: delete: %w", res.Error)
			}
			total += res.RowsAffected
			if res.RowsAffected < int64(batch) {
				break
			}
			if err := p.yield(ctx, time.Since(start)); err != nil {
				return total, err
			}
		}
	}
	return total, err
}

// yield leaves SQLite's write lock free for a while after a step that held it for took, so
// that ingestion's waiting commits get in; on Postgres, where writers do not wait for each
// other, it returns at once.
func (p *Pruner) yield(ctx context.Context, took time.Duration) error {
	if database.IsPostgres(p.DB) {
		return nil
	}
	select {
	case <-time.After(max(yieldFactor*took, minYield)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// vacuum gives the pages freed by deletes back to the file system, vacuumPages at a time
// (SQLite with auto_vacuum=INCREMENTAL; a database without it keeps its free pages for reuse).
func (p *Pruner) vacuum(ctx context.Context) error {
	var mode int
	if err := p.DB.WithContext(ctx).Raw("PRAGMA auto_vacuum").Scan(&mode).Error; err != nil || mode != 2 {
		return err
	}
	for {
		var free int64
		if err := p.DB.WithContext(ctx).Raw("PRAGMA freelist_count").Scan(&free).Error; err != nil {
			return fmt.Errorf("retention: vacuum: %w", err)
		}
		if free == 0 {
			return nil
		}
		start := time.Now()
		if err := p.vacuumStep(ctx); err != nil {
			return fmt.Errorf("retention: vacuum: %w", err)
		}
		if err := p.yield(ctx, time.Since(start)); err != nil {
			return err
		}
	}
}

// vacuumStep gives up to vacuumPages free pages back. SQLite frees one page per step of the
// statement, so its rows are read to the end (an Exec would free just one).
func (p *Pruner) vacuumStep(ctx context.Context) error {
	rows, err := p.DB.WithContext(ctx).Raw(fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumPages)).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
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
