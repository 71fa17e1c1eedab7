package eventstore

import (
	"context"
	"fmt"

	"github.com/eventq/eventq/models"
)

// Insert writes rows and their pending batches in one statement or transaction: all of them or
// none. A row whose id is stored already fails the whole write.
func (s *Store) Insert(ctx context.Context, rows []models.TrackedEvent, pending []models.PendingBatch) error {
	err := s.Write(func() error { return s.d.insert(ctx, s.db.WithContext(ctx), rows, pending) })
	if err != nil {
		return fmt.Errorf("eventstore: insert: %w", err)
	}
	return nil
}

// InsertOnce writes rows in one transaction, skipping those whose id (and created_at, which
// partitions the table on Postgres) is stored already: a write that may be a repeat.
func (s *Store) InsertOnce(ctx context.Context, rows []models.TrackedEvent) error {
	if len(rows) == 0 {
		return nil
	}
	err := s.Write(func() error { return s.d.insertOnce(ctx, s.db.WithContext(ctx), rows) })
	if err != nil {
		return fmt.Errorf("eventstore: insert: %w", err)
	}
	return nil
}

// Insert writes rows, one statement each, in the transaction (with the caller's other writes).
func (tx Tx) Insert(rows ...models.TrackedEvent) error {
	for i := range rows {
		if err := tx.db.Create(&rows[i]).Error; err != nil {
			return fmt.Errorf("eventstore: insert: %w", err)
		}
	}
	return nil
}
