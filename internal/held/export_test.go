package held

import (
	"context"
	"time"
)

// SetMarkPage makes Back read the marks n at a time.
func (s *Store) SetMarkPage(n int) { s.markPage = n }

// SetBetweenReads makes Back run fn between its reading of the batches and of the marks.
func (s *Store) SetBetweenReads(fn func()) { s.betweenReads = fn }

// CreatedAt is createdAt.
func (s *Store) CreatedAt(ctx context.Context, tenant uint64, id string) (time.Time, bool) {
	return s.createdAt(ctx, tenant, id)
}
