// Package held owns the database side of the events that are stored but not known to be in
// their queue yet: the pending batches (models.PendingBatch) and the pending marks on events
// (tracked_events.queue_pending). It writes and reads both for ingestion (internal/tracking,
// which appends and settles them), for the queue's statistics and for a queue's rebuild
// (internal/consume); the Redis side of each step is one operation of internal/eventqueue.
//
// An ingested event is not marked pending row by row: the committer writes one pending batch
// per tenant of a batch, in the same transaction as the rows, and deletes it once the events
// are in their queue. Clearing a mark per event was an UPDATE of every row (a second heap
// tuple and index entries on Postgres, a fifth of the SQLite writer's time at fifty events a
// request); deleting a batch is one row.
//
// The append of a pending batch's events is deduplicated by the batch, not by each event: the
// append script records how many of the batch's events it put in the queue
// (eventqueue.PendingKey), and appends nothing of a batch that has a record. Before anyone
// else (the re-pusher, for old batches; a held tenant's drain) takes a batch over, it claims
// it (Claim): that reads the count, or writes -1 (none went in) so that no append of it goes
// in afterwards. Whoever then deletes the batch owns its events: the pusher marks those it
// could not append (held), a claimer those after the count, in the same transaction as the
// delete; from then on they are pushed as any marked event is, deduplicated one by one. The
// pusher deletes the batch's record once it deleted the batch; a claimer's record lapses after
// eventqueue.Retention.
package held

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// Mark sets the pending mark of the events of ids, created between first and last, to
// pending. The created_at bounds let Postgres confine the update to the day partitions that
// hold them instead of probing every partition's index.
//
// On Postgres the ids go as one array parameter (id = ANY($1)), not one parameter each: the
// statement is prepared once and cached, and after five runs Postgres keeps a generic plan.
// For id IN ($1, …, $n) that plan scans the whole time range and compares every row with
// every id, many times slower than ANY($1), whose plan probes the primary key
// (docs/performance.md has the figures).
func Mark(tx *gorm.DB, ids []string, first, last time.Time, pending bool) error {
	if len(ids) == 0 {
		return nil
	}
	// A second of slack on each side: the database may store a coarser time than the row held.
	first, last = first.UTC().Add(-time.Second), last.UTC().Add(time.Second)
	q := tx.Model(&models.TrackedEvent{}).Where("created_at BETWEEN ? AND ?", first, last)
	if database.IsPostgres(tx) {
		q = q.Where("id = ANY(?)", textArray(ids))
	} else {
		q = q.Where("id IN ?", ids)
	}
	if err := q.UpdateColumn("queue_pending", pending).Error; err != nil {
		return fmt.Errorf("held: mark events: %w", err)
	}
	return nil
}

// textArray is a Postgres text[] parameter: gorm would spread a plain []string into one
// parameter per element.
type textArray []string

// Value writes the array's text form, every element quoted.
func (a textArray) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}

// DeleteBatches deletes the pending batches of ids and returns those it found: whoever deletes
// a batch owns its events.
func DeleteBatches(tx *gorm.DB, ids []string) (map[string]bool, error) {
	var gone []string
	if err := tx.Raw("DELETE FROM pending_batches WHERE id IN ? RETURNING id", ids).Scan(&gone).Error; err != nil {
		return nil, fmt.Errorf("held: delete pending batches: %w", err)
	}
	out := make(map[string]bool, len(gone))
	for _, id := range gone {
		out[id] = true
	}
	return out, nil
}

// Count counts tenant's stored events (every tenant's, if it is 0) that are not known to be
// in their queue yet: those marked pending and those of pending batches. It reads the marks
// through their index (SQLite's planner would rather walk the tenant's whole index).
func Count(ctx context.Context, db *gorm.DB, tenant uint64) (int64, error) {
	q := "SELECT count(*) FROM tracked_events WHERE queue_pending"
	if !database.IsPostgres(db) {
		q = "SELECT count(*) FROM tracked_events INDEXED BY " + models.PendingIndex + " WHERE queue_pending"
	}
	batches := db.WithContext(ctx).Model(&models.PendingBatch{})
	var args []any
	if tenant != 0 {
		q, args = q+" AND tenant_id = ?", append(args, tenant)
		batches = batches.Where("tenant_id = ?", tenant)
	}
	var n int64
	if err := db.WithContext(ctx).Raw(q, args...).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("held: count pending events: %w", err)
	}
	var lists []models.PendingBatch
	if err := batches.Select("event_ids").Find(&lists).Error; err != nil {
		return 0, fmt.Errorf("held: count pending events: %w", err)
	}
	for _, b := range lists {
		n += int64(b.Len())
	}
	return n, nil
}

// Oldest reads up to limit of the events marked pending that were created before cutoff, each
// tenant's oldest first: of tenant only, unless it is 0, and then of every tenant, tenant after
// tenant in the order of their ids (a tenant's queue keeps the order of its own events;
// tenants' queues are independent). skip, unless nil, is asked about each tenant before any of
// its events is read: a tenant it names is left alone, its events neither read nor locked.
//
// On Postgres the events read are locked until tx ends. The pass over every tenant skips
// events another transaction has locked (SKIP LOCKED), so that concurrent re-pushers share the
// backlog instead of pushing the same events. A read of one tenant waits for them instead: it
// is a held tenant's drain, the only one allowed to drain the tenant, which takes fewer events
// than it asked for as the end of the tenant's backlog. Skipping there let a rebuild end its
// drain while a pass over every tenant, which had locked the tenant's events before it learnt
// that the tenant was held, still had them: those events went in after the rebuild, behind
// newer ones.
//
// Every read is a range of models.PendingIndex, (tenant_id, created_at, id) where
// queue_pending: one per tenant, the tenants found by stepping through the index from one to
// the next. One query over every tenant in created_at order instead read and sorted every
// marked event of every tenant for each batch, those of the skipped tenants included: with a
// held tenant's large backlog marked, each batch of the re-pusher's pass over the other
// tenants took seconds, and the passes of several workers ran at once until the database
// answered nothing else.
func Oldest(tx *gorm.DB, cutoff time.Time, tenant uint64, skip func(tenant uint64) bool, limit int) ([]models.TrackedEvent, error) {
	if skip == nil {
		skip = func(uint64) bool { return false }
	}
	if tenant != 0 {
		if skip(tenant) {
			return nil, nil
		}
		return oldestOf(tx, cutoff, tenant, limit, "")
	}
	var rows []models.TrackedEvent
	for after := uint64(0); len(rows) < limit; {
		next, ok, err := nextMarkedTenant(tx, after)
		if err != nil || !ok {
			return rows, err
		}
		after = next
		if skip(next) {
			continue
		}
		part, err := oldestOf(tx, cutoff, next, limit-len(rows), "SKIP LOCKED")
		if err != nil {
			return nil, err
		}
		rows = append(rows, part...)
	}
	return rows, nil
}

// oldestOf reads up to limit of tenant's events marked pending created before cutoff, oldest
// first, locked on Postgres with the locking options given (see Oldest).
func oldestOf(tx *gorm.DB, cutoff time.Time, tenant uint64, limit int, options string) ([]models.TrackedEvent, error) {
	// queue_pending as written, so that models.PendingIndex serves the query.
	q := tx.Where("queue_pending AND tenant_id = ? AND created_at < ?", tenant, cutoff).Order("created_at, id").Limit(limit)
	if database.IsPostgres(tx) {
		q = q.Clauses(clause.Locking{Strength: "UPDATE", Options: options})
	}
	var rows []models.TrackedEvent
	if err := q.Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("held: oldest marked events: %w", err)
	}
	return rows, nil
}

// nextMarkedTenant is the lowest tenant id above after with an event marked pending: one
// step through models.PendingIndex (on SQLite named, as its planner would rather walk the
// (tenant_id, created_at) index of every event).
func nextMarkedTenant(tx *gorm.DB, after uint64) (uint64, bool, error) {
	q := "SELECT tenant_id FROM tracked_events WHERE queue_pending AND tenant_id > ? ORDER BY tenant_id LIMIT 1"
	if !database.IsPostgres(tx) {
		q = "SELECT tenant_id FROM tracked_events INDEXED BY " + models.PendingIndex + " WHERE queue_pending AND tenant_id > ? ORDER BY tenant_id LIMIT 1"
	}
	var ids []uint64
	if err := tx.Raw(q, after).Scan(&ids).Error; err != nil {
		return 0, false, fmt.Errorf("held: tenants with marked events: %w", err)
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	return ids[0], true, nil
}
