package eventqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rebuilding a queue from the database: appends held while it runs, so that nothing lands in
// the queue between its events.

// rebuildLock is how long a rebuild may hold a tenant's appends before the lock lapses (a
// crashed rebuild must not stop its queue for good).
const rebuildLock = 10 * time.Minute

// beginRebuild: KEYS list, appended set, hold mark, offset, rebuild lock, then the lease
// keys to forget; ARGV front offset, lock ms. Holds every append (lock and hold mark), empties
// the queue, its deduplication set and its leases, and sets the front offset.
var beginRebuild = redis.NewScript(`
redis.call('SET', KEYS[5], '1', 'PX', ARGV[2])
redis.call('INCR', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2])
for i = 6, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('SET', KEYS[4], ARGV[1])
return 1
`)

// BeginRebuild empties tenantID's queue to rebuild it from the database, with front as its
// front offset, and forgets its leases: lease ids issued before are unknown afterwards, and
// deliveries count from 1 again. Dead letters stay. Until EndRebuild, every append of the tenant is held (Outcome.Held), draining
// included; afterwards the tenant has a hold mark, so its held events go in, in order, before
// any new one (see Drain).
func (s *Store) BeginRebuild(ctx context.Context, tenantID uint64, front int64) error {
	keys := []string{Key(tenantID), AppendedKey(tenantID), HeldKey(tenantID), OffsetKey(tenantID), RebuildKey(tenantID),
		LeaseStateKey(tenantID), LeaseExpiryKey(tenantID), AckedKey(tenantID), GoneKey(tenantID), LeaseNextKey(tenantID), LeaseEpochKey(tenantID),
		LeaseRangesKey(tenantID), LeaseRangeStartKey(tenantID), LeaseRangeExpiryKey(tenantID), LeaseRangeHeldKey(tenantID),
		LeaseBatchesKey(tenantID), LeaseBatchesAtKey(tenantID)}
	if err := beginRebuild.Run(ctx, s.rdb, keys, front, rebuildLock.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("eventqueue: rebuild: %w", err)
	}
	if err := s.NoteHeld(ctx, tenantID); err != nil {
		return fmt.Errorf("eventqueue: rebuild: %w", err)
	}
	return nil
}

// EndRebuild lets appends of tenantID through again (behind its hold mark).
func (s *Store) EndRebuild(ctx context.Context, tenantID uint64) error {
	if err := s.rdb.Del(ctx, RebuildKey(tenantID)).Err(); err != nil {
		return fmt.Errorf("eventqueue: rebuild: %w", err)
	}
	return nil
}
