package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

// Pending batches (see the package doc): the committer writes one per tenant of a batch, in the
// same transaction as the rows, and settles it once the events are in their queue.

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
				return nil, fmt.Errorf("delivery: pending batch id: %w", err)
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
func (d *Service) settleBatches(batches []appendedBatch) {
	owned := map[uint64][]string{} // tenant -> the batches deleted here
	whole := map[uint64][]string{} // tenant -> the batches appended whole
	for _, b := range batches {
		if len(b.held) == 0 {
			whole[b.tenant] = append(whole[b.tenant], b.id)
			continue
		}
		var gone bool
		err := d.events.Update(context.Background(), func(tx eventstore.Tx) error {
			deleted, err := tx.DeleteBatches(b.tenant, []string{b.id})
			if err != nil || len(deleted) == 0 {
				return err
			}
			gone = true
			return setPending(tx, b.held, true)
		})
		if err != nil {
			d.log.Warn("delivery: could not mark held events; the re-pusher claims their batch", "events", len(b.held), "err", err)
			continue
		}
		if gone {
			owned[b.tenant] = append(owned[b.tenant], b.id)
		}
	}
	// One DELETE per tenant: on Citus each is routed to the node that holds the tenant.
	for tenant, ids := range whole {
		var deleted map[string]bool
		err := d.events.Write(func() error {
			var err error
			deleted, err = d.events.Pool(context.Background()).DeleteBatches(tenant, ids)
			return err
		})
		if err != nil {
			d.log.Warn("delivery: could not delete pending batches; the re-pusher claims them", "batches", len(ids), "err", err)
		}
		for _, id := range ids {
			if deleted[id] {
				owned[tenant] = append(owned[tenant], id)
			}
		}
	}
	if len(owned) == 0 || !d.breaker.Allow(d.clock.Now()) {
		return // the records lapse after eventqueue.Retention
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventqueue.AppendTimeout)
	defer cancel()
	for tenant, ids := range owned {
		if err := d.queue.ForgetPending(ctx, tenant, ids); err != nil {
			d.log.Warn("delivery: could not forget settled pending batches; they lapse", "tenant_id", tenant, "batches", len(ids), "err", err)
			return
		}
	}
}
