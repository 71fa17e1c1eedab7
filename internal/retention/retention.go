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
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/metrics"
	"github.com/eventq/eventq/models"
)

// ErrOff is returned by Prune when no retention is configured.
var ErrOff = errors.New("EVENT_RETENTION is off: nothing to prune (set it, e.g. EVENT_RETENTION=30d, to prune; make run leaves it off)")

// Pruner applies the retention to the stored events. Its zero Keep means retention is off.
type Pruner struct {
	DB     *gorm.DB // the tenants and the day partitions
	Events *eventstore.Store
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
	if n > 0 {
		start = time.Now()
		err = p.Events.Compact(ctx)
		p.log().Debug("retention: gave the free pages back", "took", time.Since(start))
	}
	return res, err
}

// count counts the events created before cutoff, tenant by tenant.
func (p *Pruner) count(ctx context.Context, cutoff time.Time) (int64, error) {
	tenants, err := p.tenants(ctx)
	total := int64(0)
	for _, t := range tenants {
		n, err := p.Events.CountBefore(ctx, t, cutoff)
		if err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
		total += n
	}
	return total, err
}

// deleteRows deletes the events created before cutoff that are still stored, tenant by tenant.
// Once the old day partitions are dropped, only the default partition can hold such rows.
func (p *Pruner) deleteRows(ctx context.Context, cutoff time.Time) (int64, error) {
	tenants, err := p.tenants(ctx)
	total := int64(0)
	for _, t := range tenants {
		n, err := p.Events.DeleteBefore(ctx, t, cutoff)
		total += n
		if err != nil {
			return total, fmt.Errorf("retention: %w", err)
		}
	}
	return total, err
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
		at, ok, err := p.Events.OldestAt(ctx, t)
		if err != nil {
			return 0, fmt.Errorf("retention: %w", err)
		}
		if ok && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
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
