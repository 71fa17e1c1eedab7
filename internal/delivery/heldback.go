package delivery

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

// heldPage is how many marked events Back checks against the queue at a time (a hundredth as
// many pending batches).
const heldPage = 5000

// Back counts tenantID's stored events that are marked pending, or in a pending batch, and
// are not in the queue: a marked event already appended (its mark is cleared just after the
// append) is recognised by its entry in the queue's deduplication set, and a pending batch's
// appended events by its record (eventqueue.Store.PendingAppended), so a busy healthy tenant
// shows only the events of the batches not appended yet.
//
// The pending batches are counted first, then the marks. Settling a batch deletes it and marks
// its held events in one transaction, at any moment: a batch settled before its turn is
// counted through its marks, one settled after the marks were read through itself, and one
// settled between the two readings is counted through itself, its events then skipped among
// the marks. (Read the other way round, a batch settled in between was counted nowhere.)
func (s *Held) Back(ctx context.Context, tenantID uint64) (int64, error) {
	inBatches, counted, err := s.inBatches(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	marked, err := s.marked(ctx, tenantID, counted)
	if err != nil {
		return 0, err
	}
	return inBatches + marked, nil
}

// inBatches counts the events of tenantID's pending batches that are not in the queue, and
// returns the ids of the events of the batches it counted.
func (s *Held) inBatches(ctx context.Context, tenantID uint64) (int64, map[string]bool, error) {
	var held int64
	counted := map[string]bool{}
	count := func(b *models.PendingBatch, n int64) {
		held += n
		for _, id := range b.Events() {
			counted[id] = true
		}
	}
	after := ""
	for {
		batches, err := s.Events.Pool(ctx).Batches(tenantID, time.Time{}, after, heldPage/100)
		if err != nil {
			return 0, nil, fmt.Errorf("delivery: held: count held back events: %w", err)
		}
		ids := make([]string, len(batches))
		for i, b := range batches {
			ids[i] = b.ID
		}
		// An appended batch's record says how many of its events went in (the first ones);
		// without one, none did yet, or the batch was settled meanwhile.
		recorded, err := s.Queue.PendingAppended(ctx, tenantID, ids...)
		if err != nil {
			return 0, nil, err
		}
		unrecorded := map[string]*models.PendingBatch{}
		for i := range batches {
			b := &batches[i]
			n, ok := recorded[b.ID]
			if !ok {
				unrecorded[b.ID] = b
				continue
			}
			count(b, max(int64(b.Len())-max(n, 0), 0))
		}
		if len(unrecorded) > 0 { // a batch settled meanwhile was deleted before its record
			still, err := s.Events.Pool(ctx).StillPending(tenantID, slices.Collect(maps.Keys(unrecorded)))
			if err != nil {
				return 0, nil, fmt.Errorf("delivery: held: count held back events: %w", err)
			}
			for _, id := range still {
				b := unrecorded[id]
				count(b, int64(b.Len()))
			}
		}
		if len(batches) < heldPage/100 {
			return held, counted, nil
		}
		after = batches[len(batches)-1].ID
	}
}

// marked counts tenantID's events marked pending that are not in the queue, but for those
// in skip.
func (s *Held) marked(ctx context.Context, tenantID uint64, skip map[string]bool) (int64, error) {
	page := s.MarkPage
	if page == 0 {
		page = heldPage
	}
	var held int64
	var after eventstore.Marked // the last page's last marked event
	for {
		rows, err := s.Events.Pool(ctx).MarkedPage(tenantID, after, page)
		if err != nil {
			return 0, fmt.Errorf("delivery: held: count held back events: %w", err)
		}
		if len(rows) == 0 {
			return held, nil
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		in, err := s.Queue.Appended(ctx, tenantID, ids)
		if err != nil {
			return 0, err
		}
		for i, queued := range in {
			if !queued && !skip[ids[i]] {
				held++
			}
		}
		if len(rows) < page {
			return held, nil
		}
		after = rows[len(rows)-1]
	}
}
