package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
)

// claimChunk is how many pending batches a claim reads at a time.
const claimChunk = 100

// Held claims, counts and re-marks held events: the steps that need the database and the
// queue together.
type Held struct {
	Events *eventstore.Store
	Queue  *eventqueue.Store
	// MarkPage is how many marks Back reads at a time; 0 means heldPage.
	MarkPage int
}

// Claim turns the pending batches committed before cutoff (of tenant only, unless it is 0)
// into pending marks on those of their events no append put in the queue. Each batch is first
// claimed in Redis (eventqueue.Store.ClaimPending), which says how many of its events an append
// put in, and from then on keeps any append of it out; then, in one transaction, whoever
// deletes the batch marks the rest.
func (s *Held) Claim(ctx context.Context, tenant uint64, cutoff time.Time) error {
	after := ""
	for {
		batches, err := s.Events.Pool(ctx).Batches(tenant, cutoff, after, claimChunk)
		if err != nil {
			return fmt.Errorf("delivery: held: claim: %w", err)
		}
		if len(batches) == 0 {
			return nil
		}
		appended := make([]int64, len(batches))
		for i, b := range batches {
			n, err := s.Queue.ClaimPending(ctx, b.TenantID, b.ID)
			if err != nil {
				return fmt.Errorf("delivery: held: %w", err)
			}
			appended[i] = max(n, 0)
		}
		err = s.Events.Update(ctx, func(tx eventstore.Tx) error {
			for i, b := range batches {
				deleted, err := tx.DeleteBatches(b.TenantID, []string{b.ID})
				if err != nil {
					return err
				}
				events := b.Events()
				if !deleted[b.ID] || appended[i] >= int64(len(events)) {
					continue
				}
				if err := tx.Mark(b.TenantID, events[appended[i]:], true); err != nil {
					return fmt.Errorf("delivery: held: claim pending batches: %w", err)
				}
			}
			return nil
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
