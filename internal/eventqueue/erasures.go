package eventqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErasuresKey counts tenantID's erasure requests. An erasure bumps it before its 202, and
// ingestion compares it with the count its cache of erased members was read at: an event
// tracked after the 202, on any api process, is stored without the member (a cache that is
// merely short-lived would let the first half-second's events name the member).
func ErasuresKey(tenantID uint64) string { return tenantKey(tenantID, "erasures") }

// NoteErasure bumps tenantID's erasure count.
func (s *Store) NoteErasure(ctx context.Context, tenantID uint64) error {
	if err := s.rdb.Incr(ctx, ErasuresKey(tenantID)).Err(); err != nil {
		return fmt.Errorf("eventqueue: note erasure: %w", err)
	}
	return nil
}

// Erasures is tenantID's erasure count (0 when it never had one).
func (s *Store) Erasures(ctx context.Context, tenantID uint64) (int64, error) {
	n, err := s.rdb.Get(ctx, ErasuresKey(tenantID)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("eventqueue: erasures: %w", err)
	}
	return n, nil
}
