package eventstore

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// Mark sets the pending mark of tenant's events of ids to pending. The primary key
// (tenant_id, id) finds them: a created_at bound led both databases' planners to read the
// tenant's span on (tenant_id, created_at) instead.
func (tx Tx) Mark(tenant uint64, ids []string, pending bool) error {
	if len(ids) == 0 {
		return nil
	}
	q := tx.d.idIn(tx.db.Model(&models.TrackedEvent{}).Where("tenant_id = ?", tenant), ids)
	if err := q.UpdateColumn("queue_pending", pending).Error; err != nil {
		return fmt.Errorf("eventstore: mark events: %w", err)
	}
	return nil
}

// DeleteBatches deletes tenant's pending batches of ids and returns those it found: whoever
// deletes a batch owns its events.
func (tx Tx) DeleteBatches(tenant uint64, ids []string) (map[string]bool, error) {
	var gone []string
	if err := tx.db.Raw("DELETE FROM pending_batches WHERE tenant_id = ? AND id IN ? RETURNING id", tenant, ids).Scan(&gone).Error; err != nil {
		return nil, fmt.Errorf("eventstore: delete pending batches: %w", err)
	}
	out := make(map[string]bool, len(gone))
	for _, id := range gone {
		out[id] = true
	}
	return out, nil
}

// Batches reads up to limit pending batches with ids after after, in id order: those committed
// before cutoff, unless it is zero, and those of tenant, unless it is 0 (AcrossTenants).
func (tx Tx) Batches(tenant uint64, cutoff time.Time, after string, limit int) ([]models.PendingBatch, error) {
	var batches []models.PendingBatch
	err := tx.scoped(tenant, func(db *gorm.DB) error {
		q := db.Where("id > ?", after).Order("id").Limit(limit)
		if !cutoff.IsZero() {
			q = q.Where("created_at < ?", cutoff)
		}
		if tenant != 0 {
			q = q.Where("tenant_id = ?", tenant)
		}
		return q.Find(&batches).Error
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: pending batches: %w", err)
	}
	return batches, nil
}

// StillPending returns those of tenant's pending batches of ids that are still stored.
func (tx Tx) StillPending(tenant uint64, ids []string) ([]string, error) {
	var still []string
	if err := tx.db.Model(&models.PendingBatch{}).Where("tenant_id = ? AND id IN ?", tenant, ids).Pluck("id", &still).Error; err != nil {
		return nil, fmt.Errorf("eventstore: pending batches: %w", err)
	}
	return still, nil
}

// Count counts tenant's stored events (every tenant's, if it is 0: AcrossTenants) that are
// not known to be in their queue yet: those marked pending and those of pending batches. It
// reads the marks through models.PendingIndex.
func (tx Tx) Count(tenant uint64) (int64, error) {
	var (
		n     int64
		lists []models.PendingBatch
	)
	err := tx.scoped(tenant, func(db *gorm.DB) error {
		q := "SELECT count(*) FROM " + tx.d.pendingFrom() + " WHERE queue_pending"
		batches := db.Model(&models.PendingBatch{})
		var args []any
		if tenant != 0 {
			q, args = q+" AND tenant_id = ?", append(args, tenant)
			batches = batches.Where("tenant_id = ?", tenant)
		}
		if err := db.Raw(q, args...).Scan(&n).Error; err != nil {
			return err
		}
		return batches.Select("event_ids").Find(&lists).Error
	})
	if err != nil {
		return 0, fmt.Errorf("eventstore: count pending events: %w", err)
	}
	for _, b := range lists {
		n += int64(b.Len())
	}
	return n, nil
}

// Count is Tx.Count on the pool.
func (s *Store) Count(ctx context.Context, tenant uint64) (int64, error) {
	return s.Pool(ctx).Count(tenant)
}

// Oldest reads up to limit of the events marked pending that were created before cutoff, each
// tenant's oldest first: of tenant only, unless it is 0, and then of every tenant, tenant after
// tenant in the order of their ids (a tenant's queue keeps the order of its own events;
// tenants' queues are independent). skip, unless nil, is asked about each tenant before any of
// its events is read: a tenant it names is left alone, its events neither read nor locked.
//
// In a Locking transaction the events read are locked until it ends. The pass over every
// tenant skips events another transaction has locked (SKIP LOCKED), so that concurrent
// re-pushers share the backlog instead of pushing the same events. A read of one tenant waits
// for them instead: it is a held tenant's drain, the only one allowed to drain the tenant,
// which takes fewer events than it asked for as the end of the tenant's backlog. Skipping
// there let a rebuild end its drain while a pass over every tenant, which had locked the
// tenant's events before it learnt that the tenant was held, still had them: those events
// went in after the rebuild, behind newer ones.
//
// Every read is a range of models.PendingIndex, (tenant_id, created_at, id) where
// queue_pending: one per tenant, the tenants found by stepping through the index from one to
// the next. One query over every tenant in created_at order would read and sort every marked
// event of every tenant for each batch, those of the skipped tenants included.
func (tx Tx) Oldest(cutoff time.Time, tenant uint64, skip func(tenant uint64) bool, limit int) ([]models.TrackedEvent, error) {
	if skip == nil {
		skip = func(uint64) bool { return false }
	}
	if tenant != 0 {
		if skip(tenant) {
			return nil, nil
		}
		return tx.oldestOf(cutoff, tenant, limit, "")
	}
	var rows []models.TrackedEvent
	for after := uint64(0); len(rows) < limit; {
		next, ok, err := tx.nextMarkedTenant(after)
		if err != nil || !ok {
			return rows, err
		}
		after = next
		if skip(next) {
			continue
		}
		part, err := tx.oldestOf(cutoff, next, limit-len(rows), "SKIP LOCKED")
		if err != nil {
			return nil, err
		}
		rows = append(rows, part...)
	}
	return rows, nil
}

// oldestOf reads up to limit of tenant's events marked pending created before cutoff, oldest
// first, locked with the locking options given (see Oldest).
func (tx Tx) oldestOf(cutoff time.Time, tenant uint64, limit int, options string) ([]models.TrackedEvent, error) {
	// queue_pending as written, so that models.PendingIndex serves the query.
	q := tx.db.Where("queue_pending AND tenant_id = ? AND created_at < ?", tenant, cutoff).Order("created_at, id").Limit(limit)
	var rows []models.TrackedEvent
	if err := tx.d.lock(q, options).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("eventstore: oldest marked events: %w", err)
	}
	return rows, nil
}

// nextMarkedTenant is the lowest tenant id above after with an event marked pending: one
// step through models.PendingIndex.
func (tx Tx) nextMarkedTenant(after uint64) (uint64, bool, error) {
	q := "SELECT tenant_id FROM " + tx.d.pendingFrom() + " WHERE queue_pending AND tenant_id > ? ORDER BY tenant_id LIMIT 1"
	var ids []uint64
	if err := tx.scoped(0, func(db *gorm.DB) error { return db.Raw(q, after).Scan(&ids).Error }); err != nil {
		return 0, false, fmt.Errorf("eventstore: tenants with marked events: %w", err)
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	return ids[0], true, nil
}

// Marked is one event marked pending, as MarkedPage reads it.
type Marked struct {
	ID        string
	CreatedAt time.Time
}

// MarkedPage reads up to limit of tenant's events marked pending, in the order of
// models.PendingIndex, after the event after (none: from the first).
func (tx Tx) MarkedPage(tenant uint64, after Marked, limit int) ([]Marked, error) {
	q := tx.db.Model(&models.TrackedEvent{}).Select("id", "created_at").
		Where("queue_pending AND tenant_id = ?", tenant) // models.PendingIndex, in its order
	if after.ID != "" {
		q = q.Where("(created_at, id) > (?, ?)", after.CreatedAt, after.ID)
	}
	var rows []Marked
	if err := q.Order("created_at, id").Limit(limit).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("eventstore: marked events: %w", err)
	}
	return rows, nil
}

// MarkUntrimmed marks pending every stored event of tenant that was queued after front (the
// trim log's record of the queue's front), and counts them: what a rebuild puts back.
func (tx Tx) MarkUntrimmed(tenant uint64, front models.QueueFront) (int64, error) {
	q := tx.db.Model(&models.TrackedEvent{}).Where("tenant_id = ? AND queued = ?", tenant, true)
	if front.TrimmedThrough != "" {
		q = q.Where("id > ?", front.TrimmedThrough)
		// Ids sort by time: bound the scan on the (tenant_id, created_at) index.
		if at, ok := tx.createdAt(tenant, front.TrimmedThrough); ok {
			q = q.Where("created_at >= ?", at.Add(-idTimeSlack))
		}
	}
	res := q.UpdateColumn("queue_pending", true)
	if res.Error != nil {
		return 0, fmt.Errorf("eventstore: mark untrimmed events: %w", res.Error)
	}
	return res.RowsAffected, nil
}

// idTimeSlack is how far from the time in its UUID v7 an event's created_at is looked for
// first: the two are taken from clocks a moment apart.
const idTimeSlack = time.Hour

// createdAt looks up the created_at of tenant's stored event id. It first looks near the time
// in the id (a UUID v7), which confines the lookup to that day's partitions, and only then
// everywhere.
func (tx Tx) createdAt(tenant uint64, id string) (time.Time, bool) {
	var rows []models.TrackedEvent
	q := func() *gorm.DB {
		return tx.db.Select("created_at").Where("tenant_id = ? AND id = ?", tenant, id).Limit(1)
	}
	if u, err := uuid.Parse(id); err == nil && u.Version() == 7 {
		sec, nsec := u.Time().UnixTime()
		at := time.Unix(sec, nsec).UTC()
		if err := q().Where("created_at BETWEEN ? AND ?", at.Add(-idTimeSlack), at.Add(idTimeSlack)).Find(&rows).Error; err == nil && len(rows) == 1 {
			return rows[0].CreatedAt, true
		}
	}
	if err := q().Find(&rows).Error; err == nil && len(rows) == 1 {
		return rows[0].CreatedAt, true
	}
	return time.Time{}, false
}

// scoped runs fn on tx's database: as it is for one tenant's statements, or, for tenant 0,
// in database.AcrossTenants, the statements of every tenant's rows.
func (tx Tx) scoped(tenant uint64, fn func(db *gorm.DB) error) error {
	if tenant != 0 {
		return fn(tx.db)
	}
	return database.AcrossTenants(tx.db, fn)
}
