package eventqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Hold marks: while a tenant's queue is full, its events wait in the database behind a mark,
// and the re-pusher finds the tenants that have one.

// HeldTenantsKey is the set of tenants with a hold mark, for the re-pusher to find them. It is
// not in the tenants' slots: it is kept beside the scripts, not by them.
const HeldTenantsKey = "eventqueue:held-tenants"

// releaseHold: KEYS hold mark; ARGV the mark's value when the caller found nothing held.
// Deletes the mark only if no event was held since.
var releaseHold = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// ReleaseHold removes tenantID's hold mark if it still has the value mark (see HoldMark),
// that is if nothing was held since, and then forgets the tenant in HeldTenantsKey. It
// reports whether the mark is gone.
func (s *Store) ReleaseHold(ctx context.Context, tenantID uint64, mark string) (bool, error) {
	if mark != "" {
		if err := releaseHold.Run(ctx, s.rdb, []string{HeldKey(tenantID)}, mark).Err(); err != nil {
			return false, fmt.Errorf("eventqueue: release hold: %w", err)
		}
	}
	n, err := s.rdb.Exists(ctx, HeldKey(tenantID)).Result()
	if err != nil || n > 0 {
		return false, err
	}
	return true, s.rdb.SRem(ctx, HeldTenantsKey, tenantID).Err()
}

// HoldMark is tenantID's hold mark, or "" when it has none.
func (s *Store) HoldMark(ctx context.Context, tenantID uint64) (string, error) {
	v, err := s.rdb.Get(ctx, HeldKey(tenantID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// NoteHeld records tenants with a hold mark in HeldTenantsKey.
func (s *Store) NoteHeld(ctx context.Context, tenantIDs ...uint64) error {
	if len(tenantIDs) == 0 {
		return nil
	}
	members := make([]any, len(tenantIDs))
	for i, t := range tenantIDs {
		members[i] = t
	}
	return s.rdb.SAdd(ctx, HeldTenantsKey, members...).Err()
}

// Hold sets the hold mark of each of tenantIDs (recording them in HeldTenantsKey first), as a
// full queue does: their events appended from now on are held behind the mark, and go in, in
// order, with their pending ones, when the re-pusher drains them.
func (s *Store) Hold(ctx context.Context, tenantIDs ...uint64) error {
	if err := s.NoteHeld(ctx, tenantIDs...); err != nil {
		return fmt.Errorf("eventqueue: hold: %w", err)
	}
	pipe := s.rdb.Pipeline() // one round trip (one per node, on a cluster)
	for _, t := range tenantIDs {
		pipe.Incr(ctx, HeldKey(t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("eventqueue: hold: %w", err)
	}
	return nil
}

// HeldTenants lists the tenants recorded in HeldTenantsKey.
func (s *Store) HeldTenants(ctx context.Context) ([]uint64, error) {
	var ids []uint64
	err := s.rdb.SMembers(ctx, HeldTenantsKey).ScanSlice(&ids)
	return ids, err
}
