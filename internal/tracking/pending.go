package tracking

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/models"
)

// Pending batches. An ingested event is not marked pending row by row: the committer writes one
// models.PendingBatch per tenant of a batch, in the same transaction as the rows, and deletes it
// once the events are in their queue. Clearing a mark per event was an UPDATE of every row
// (a second heap tuple and index entries on Postgres, a fifth of the SQLite writer's time at
// fifty events a request); deleting a batch is one row.
//
// The append of a pending batch's events is deduplicated by the batch, not by each event: the
// append script records how many of the batch's events it put in the queue
// (eventqueue.PendingKey), and appends nothing of a batch that has a record. Before anyone
// else (the re-pusher, for batches older than RequeueMinAge; a held tenant's drain) takes a
// batch over, it claims it in Redis (eventqueue.ClaimPending): that reads the count, or writes
// -1 (none went in) so that no append of it goes in afterwards. Whoever then deletes the batch
// owns its events: the pusher marks those it could not append (held), a claimer those after
// the count, in the same transaction as the delete; from then on they are pushed as any marked
// event is, deduplicated one by one. The pusher deletes the batch's record once it deleted the
// batch; a claimer's record lapses after eventqueue.Retention.

// claimChunk is how many pending batches a claim reads at a time.
const claimChunk = 100

// newPendingBatches returns one pending batch for each tenant of the queued requests, and
// records its id in the requests (commitRequest.pending).
func newPendingBatches(reqs []*commitRequest) ([]models.PendingBatch, error) {
	var out []models.PendingBatch
	byTenant := map[uint64]int{}
	var ids [][]byte // ids[i]: the comma-separated ids of out[i]
	size := idsSizes(reqs)
	for _, r := range reqs {
		r.pending = ""
		if !r.queued || len(r.rows) == 0 {
			continue
		}
		i, ok := byTenant[r.tenant]
		if !ok {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("tracking: pending batch id: %w", err)
			}
			i = len(out)
			byTenant[r.tenant] = i
			at := r.rows[0].CreatedAt
			out = append(out, models.PendingBatch{ID: id.String(), TenantID: r.tenant, FirstAt: at, LastAt: at})
			ids = append(ids, make([]byte, 0, size[r.tenant]))
		}
		b := &out[i]
		r.pending = b.ID
		for _, row := range r.rows {
			if len(ids[i]) > 0 {
				ids[i] = append(ids[i], ',')
			}
			ids[i] = append(ids[i], row.ID...)
			b.FirstAt, b.LastAt = earlier(b.FirstAt, row.CreatedAt), later(b.LastAt, row.CreatedAt)
		}
	}
	for i := range out {
		// Its age is its events' (the committer's clock): the re-pusher takes batches and
		// marked events by the same cutoff.
		out[i].EventIDs, out[i].CreatedAt = string(ids[i]), out[i].FirstAt
	}
	return out, nil
}

// idsSizes is, for each tenant of the queued rows of reqs, the length of their comma-separated
// ids: one pass, whatever the number of tenants in the batch.
func idsSizes(reqs []*commitRequest) map[uint64]int {
	n := map[uint64]int{}
	for _, r := range reqs {
		if r.queued {
			k := 0
			for _, row := range r.rows {
				k += len(row.ID) + 1
			}
			n[r.tenant] += k
		}
	}
	return n
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// appendedBatch is a pending batch whose events went to their queue, all or some of them.
type appendedBatch struct {
	id       string
	tenant   uint64
	appended int           // how many are in the queue now (the first ones)
	held     []queuedEvent // the queue was full: these are to be marked pending
}

// settleBatches deletes appended pending batches, marks the held events of each batch it
// deleted, and then lets the queue forget the batches it deleted (eventqueue.ForgetPending). A
// batch already gone was claimed by someone else, who marked the events not appended and
// pushes them.
func (in *Ingestor) settleBatches(batches []appendedBatch) {
	owned := map[uint64][]string{} // tenant -> the batches deleted here
	var whole []string             // ids of the batches appended whole
	for _, b := range batches {
		if len(b.held) == 0 {
			whole = append(whole, b.id)
			continue
		}
		var gone bool
		err := in.sqlite.writing(func() error {
			return in.db.Transaction(func(tx *gorm.DB) error {
				deleted, err := deletePendingBatches(tx, []string{b.id})
				if err != nil || len(deleted) == 0 {
					return err
				}
				gone = true
				return setPending(tx, b.held, true)
			})
		})
		if err != nil {
			in.log.Warn("tracking: could not mark held events; the re-pusher claims their batch", "events", len(b.held), "err", err)
			continue
		}
		if gone {
			owned[b.tenant] = append(owned[b.tenant], b.id)
		}
	}
	if len(whole) > 0 {
		var deleted map[string]bool
		err := in.sqlite.writing(func() error {
			var err error
			deleted, err = deletePendingBatches(in.db, whole)
			return err
		})
		if err != nil {
			in.log.Warn("tracking: could not delete pending batches; the re-pusher claims them", "batches", len(whole), "err", err)
		}
		for _, b := range batches {
			if deleted[b.id] {
				owned[b.tenant] = append(owned[b.tenant], b.id)
			}
		}
	}
	if len(owned) == 0 || !in.breaker.Allow(in.clock.Now()) {
		return // the records lapse after eventqueue.Retention
	}
	ctx, cancel := context.WithTimeout(context.Background(), AppendTimeout)
	defer cancel()
	for tenant, ids := range owned {
		if err := in.queue.ForgetPending(ctx, tenant, ids); err != nil {
			in.log.Warn("tracking: could not forget settled pending batches; they lapse", "tenant_id", tenant, "batches", len(ids), "err", err)
			return
		}
	}
}

// deletePendingBatches deletes the pending batches of ids and returns those it found.
func deletePendingBatches(tx *gorm.DB, ids []string) (map[string]bool, error) {
	var gone []string
	if err := tx.Raw("DELETE FROM pending_batches WHERE id IN ? RETURNING id", ids).Scan(&gone).Error; err != nil {
		return nil, fmt.Errorf("tracking: delete pending batches: %w", err)
	}
	out := make(map[string]bool, len(gone))
	for _, id := range gone {
		out[id] = true
	}
	return out, nil
}

// claimPendingBatches turns the pending batches committed before cutoff (of tenant only, unless
// it is 0) into pending marks on those of their events no append put in the queue. Each batch is first claimed in Redis (eventqueue.ClaimPending),
// which says how many of its events an append put in, and from then on keeps any append of it
// out; then, in one transaction, whoever deletes the batch marks the rest.
func (in *Ingestor) claimPendingBatches(ctx context.Context, tenant uint64, cutoff time.Time) error {
	after := ""
	for {
		q := in.db.WithContext(ctx).Where("created_at < ? AND id > ?", cutoff, after).Order("id").Limit(claimChunk)
		if tenant != 0 {
			q = q.Where("tenant_id = ?", tenant)
		}
		var batches []models.PendingBatch
		if err := q.Find(&batches).Error; err != nil {
			return fmt.Errorf("tracking: claim pending batches: %w", err)
		}
		if len(batches) == 0 {
			return nil
		}
		appended := make([]int64, len(batches))
		for i, b := range batches {
			n, err := in.queue.ClaimPending(ctx, b.TenantID, b.ID)
			if err != nil {
				return fmt.Errorf("tracking: %w", err)
			}
			appended[i] = max(n, 0)
		}
		err := in.sqlite.writing(func() error {
			return in.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				for i, b := range batches {
					deleted, err := deletePendingBatches(tx, []string{b.ID})
					if err != nil {
						return err
					}
					events := b.Events()
					if !deleted[b.ID] || appended[i] >= int64(len(events)) {
						continue
					}
					if err := markPending(tx, events[appended[i]:], b.FirstAt, b.LastAt, true); err != nil {
						return fmt.Errorf("tracking: claim pending batches: %w", err)
					}
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		if len(batches) < claimChunk {
			return nil
		}
		after = batches[len(batches)-1].ID
	}
}

// PendingEvents counts tenant's stored events (every tenant's, if it is 0) that are not known
// to be in their queue yet: those marked pending and those of pending batches. It reads the
// marks through their index (SQLite's planner would rather walk the tenant's whole index).
func PendingEvents(ctx context.Context, db *gorm.DB, tenant uint64) (int64, error) {
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
		return 0, fmt.Errorf("tracking: count pending events: %w", err)
	}
	var lists []models.PendingBatch
	if err := batches.Select("event_ids").Find(&lists).Error; err != nil {
		return 0, fmt.Errorf("tracking: count pending events: %w", err)
	}
	for _, b := range lists {
		n += int64(b.Len())
	}
	return n, nil
}
