package eventstore

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// sweepPace is how a Sweep reads and deletes: pages of page events read at a time, the ones to
// delete deleted in batches of batch, each batch followed by a pause pause times as long as it
// took, and each page's read by one readPause times as long as it took.
type sweepPace struct {
	page, batch, pause int
}

// readPause is the pause after a sweep's read of a page, in multiples of the read's time:
// reads take CPU from ingestion, not locks.
const readPause = 2

// A sweep goes slowly: an erasure has a minute for 100,000 events among a million and would
// take a fraction of it at full speed.
//
// On Postgres a batch's commit flushes its WAL, which ingestion's commits queue behind, and
// the WAL of a deletion is mostly whole pages (the first change of a page after a checkpoint
// writes all of it, and a member's events are spread over every page): small batches keep
// that flush short. Pages are small for the same reason: a large read keeps a core busy, and
// ingestion's latency rises while it runs.
func (postgres) sweep() sweepPace { return sweepPace{page: 1000, batch: 50, pause: 4} }

// On SQLite what ingestion meets is the write lock: a commit that finds it held sleeps in
// SQLite's busy handler, in growing steps; a batch small enough to hold the lock for about a
// millisecond costs a commit that meets it one retry, and what decides ingestion's p99 is that
// cost, not how often it is paid. docs/performance-log.md ("Privacy") has the measurements.
func (*sqliteWriter) sweep() sweepPace { return sweepPace{page: 500, batch: 20, pause: 2} }

// Sweep deletes tenantID's events that name one of members (all its events, when members is
// empty) and that pick (nil: every one) picks. It reads them in pages in (created_at, id)
// order, each page reading on from the last event of the one before, and deletes what it
// picked in batches. A batch is deleted in one short transaction within its created_at span
// (which confines it to the day partitions of that span), together with deleted, which is
// given the transaction and the number of rows deleted (the caller's count of them). Pauses
// after each read and each batch leave ingestion its share (sweepPace).
func (s *Store) Sweep(ctx context.Context, tenantID uint64, members []string, pick func(*models.TrackedEvent) bool,
	deleted func(tx *gorm.DB, n int64) error) error {
	pace := s.d.sweep()
	var last *models.TrackedEvent
	for {
		started := time.Now()
		q := s.db.WithContext(ctx).Model(&models.TrackedEvent{}).Select("id", "tenant_id", "created_at", "session_id", "audience_member_id").
			Where("tenant_id = ?", tenantID)
		if len(members) > 0 {
			q = q.Where("audience_member_id IN ?", members)
		}
		if last != nil {
			q = q.Where("created_at >= ? AND (created_at > ? OR id > ?)", last.CreatedAt, last.CreatedAt, last.ID)
		}
		var rows []models.TrackedEvent
		if err := q.Order("created_at, id").Limit(pace.page).Find(&rows).Error; err != nil {
			return fmt.Errorf("eventstore: sweep: read events: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		end := rows[len(rows)-1]
		last = &end
		if err := wait(ctx, readPause*time.Since(started)); err != nil {
			return err
		}
		picked := rows[:0]
		for i := range rows {
			if pick == nil || pick(&rows[i]) {
				picked = append(picked, rows[i])
			}
		}
		for start := 0; start < len(picked); start += pace.batch {
			took, err := s.deleteRows(ctx, picked[start:min(start+pace.batch, len(picked))], deleted)
			if err != nil {
				return err
			}
			if err := wait(ctx, time.Duration(pace.pause)*took); err != nil {
				return err
			}
		}
		if len(rows) < pace.page {
			return nil
		}
	}
}

// deleteRows deletes rows (one tenant's, in (created_at, id) order) and runs deleted in one
// transaction, and returns how long that took.
func (s *Store) deleteRows(ctx context.Context, rows []models.TrackedEvent, deleted func(tx *gorm.DB, n int64) error) (time.Duration, error) {
	started := time.Now()
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("tenant_id = ? AND id IN ? AND created_at >= ? AND created_at <= ?", rows[0].TenantID, ids, rows[0].CreatedAt, rows[len(rows)-1].CreatedAt).
			Delete(&models.TrackedEvent{})
		if res.Error != nil {
			return res.Error
		}
		return deleted(tx, res.RowsAffected)
	})
	if err != nil {
		return 0, fmt.Errorf("eventstore: sweep: delete events: %w", err)
	}
	return time.Since(started), nil
}

// wait pauses for d, or until ctx is done.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
