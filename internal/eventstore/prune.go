package eventstore

import (
	"context"
	"fmt"
	"time"

	"github.com/eventq/eventq/models"
)

// prunePace is how DeleteBefore deletes: batch rows per statement (and so per transaction),
// and, where writers exclude each other, after each step a pause yield times as long as the
// step took (at least minYield), so that waiting writers get in; vacuum says whether the freed
// pages are given back to the file system afterwards.
type prunePace struct {
	batch  int
	yield  int
	vacuum bool
	delete string // the DELETE of up to batch rows of a tenant created before a cutoff
}

// minYield is the shortest pause after a prune step that held a single writer's lock.
const minYield = 2 * time.Millisecond

// vacuumPages is how many free pages one step of SQLite's incremental vacuum gives back.
const vacuumPages = 64

// On Postgres, once the old day partitions are dropped (internal/retention), only the default
// partition can hold rows to prune, and partition pruning confines the statements to it; the
// outer created_at bound lets it prune partitions for the DELETE itself too.
func (postgres) prune() prunePace {
	return prunePace{batch: 10000, delete: "DELETE FROM tracked_events WHERE tenant_id = ? AND created_at < ? AND (id, created_at) IN " +
		"(SELECT id, created_at FROM tracked_events WHERE tenant_id = ? AND created_at < ? LIMIT ?)"}
}

// SQLite has one writer for the whole database: while a prune step holds the write lock, every
// ingestion commit waits. So a step deletes a few milliseconds' worth of rows, and leaves the
// lock free for three times as long as it took; the prune takes longer, ingestion barely
// notices it. The outer conditions carry a unary + so that SQLite finds the step's rows by
// their rowids: on the (tenant_id, created_at) index it read every row of the tenant left
// before the cutoff at each step, and a prune of a million events took 660 s instead of 31.
func (*sqliteWriter) prune() prunePace {
	return prunePace{batch: 500, yield: 3, vacuum: true, delete: "DELETE FROM tracked_events WHERE +tenant_id = ? AND +created_at < ? AND rowid IN " +
		"(SELECT rowid FROM tracked_events WHERE tenant_id = ? AND created_at < ? LIMIT ?)"}
}

// CountBefore counts tenant's events created before cutoff, on the (tenant_id, created_at) index.
func (s *Store) CountBefore(ctx context.Context, tenant uint64, cutoff time.Time) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.TrackedEvent{}).
		Where("tenant_id = ? AND created_at < ?", tenant, cutoff.UTC()).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("eventstore: count: %w", err)
	}
	return n, nil
}

// DeleteBefore deletes tenant's events created before cutoff, on the (tenant_id, created_at)
// index, in steps that leave other writers their turn (prunePace), and returns how many it
// deleted.
func (s *Store) DeleteBefore(ctx context.Context, tenant uint64, cutoff time.Time) (int64, error) {
	pace := s.d.prune()
	total := int64(0)
	for {
		start := time.Now()
		res := s.db.WithContext(ctx).Exec(pace.delete, tenant, cutoff.UTC(), tenant, cutoff.UTC(), pace.batch)
		if res.Error != nil {
			return total, fmt.Errorf("eventstore: delete: %w", res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < int64(pace.batch) {
			return total, nil
		}
		if err := s.yield(ctx, pace, time.Since(start)); err != nil {
			return total, err
		}
	}
}

// yield leaves a single writer's lock free for a while after a step that held it for took.
func (s *Store) yield(ctx context.Context, pace prunePace, took time.Duration) error {
	if pace.yield == 0 {
		return nil
	}
	return wait(ctx, max(time.Duration(pace.yield)*took, minYield))
}

// Compact gives the pages that deletes freed back to the file system, a few at a time, where
// the database keeps them otherwise (SQLite with auto_vacuum=INCREMENTAL; a database without
// it keeps its free pages for reuse).
func (s *Store) Compact(ctx context.Context) error {
	pace := s.d.prune()
	if !pace.vacuum {
		return nil
	}
	var mode int
	if err := s.db.WithContext(ctx).Raw("PRAGMA auto_vacuum").Scan(&mode).Error; err != nil || mode != 2 {
		return err
	}
	for {
		var free int64
		if err := s.db.WithContext(ctx).Raw("PRAGMA freelist_count").Scan(&free).Error; err != nil {
			return fmt.Errorf("eventstore: vacuum: %w", err)
		}
		if free == 0 {
			return nil
		}
		start := time.Now()
		if err := s.vacuumStep(ctx); err != nil {
			return fmt.Errorf("eventstore: vacuum: %w", err)
		}
		if err := s.yield(ctx, pace, time.Since(start)); err != nil {
			return err
		}
	}
}

// vacuumStep gives up to vacuumPages free pages back. SQLite frees one page per step of the
// statement, so its rows are read to the end (an Exec would free just one).
func (s *Store) vacuumStep(ctx context.Context) error {
	rows, err := s.db.WithContext(ctx).Raw(fmt.Sprintf("PRAGMA incremental_vacuum(%d)", vacuumPages)).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// OldestAt is when tenant's oldest stored event was created; ok is false when it has none.
func (s *Store) OldestAt(ctx context.Context, tenant uint64) (at time.Time, ok bool, err error) {
	var rows []models.TrackedEvent
	err = s.db.WithContext(ctx).Select("created_at").Where("tenant_id = ?", tenant).
		Order("created_at").Limit(1).Find(&rows).Error
	if err != nil {
		return time.Time{}, false, fmt.Errorf("eventstore: oldest event: %w", err)
	}
	if len(rows) == 0 {
		return time.Time{}, false, nil
	}
	return rows[0].CreatedAt, true, nil
}
