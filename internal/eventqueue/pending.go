package eventqueue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Pending batches: what became of each batch of events committed as pending, so that the
// re-pusher and the api never both append it.

// claimPending: KEYS a PendingKey; ARGV retention (ms). Returns the key's count, after setting
// it to -1 if it had none.
var claimPending = redis.NewScript(`
if redis.call('SET', KEYS[1], -1, 'NX', 'PX', ARGV[1]) then
  return -1
end
return tonumber(redis.call('GET', KEYS[1]))
`)

// ClaimPending takes tenantID's pending batch id out of the appends' hands: it returns how
// many of its events an append put in the queue (its first ones), or -1 if none did, after
// which no append of it goes in (Outcome.Skipped).
func (s *Store) ClaimPending(ctx context.Context, tenantID uint64, id string) (int64, error) {
	n, err := claimPending.Run(ctx, s.rdb, []string{PendingKey(tenantID, id)}, Retention.Milliseconds()).Int64()
	if err != nil {
		return 0, fmt.Errorf("eventqueue: claim pending batch: %w", err)
	}
	return n, nil
}

// PendingAppended reports, for each of tenantID's pending batches ids that has a record, how
// many of its events an append put in the queue (-1 if it was claimed first). A batch missing
// from the result has no record: it is not appended yet. The records are read with one MGET
// for each maxScriptEvents ids (they share the tenant's slot).
func (s *Store) PendingAppended(ctx context.Context, tenantID uint64, ids ...string) (map[string]int64, error) {
	out := make(map[string]int64, len(ids))
	err := pendingChunks(tenantID, ids, func(part, keys []string) error {
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return fmt.Errorf("eventqueue: pending batches: %w", err)
		}
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // nil: no record
			}
			n, err := strconv.ParseInt(str, 10, 64)
			if err != nil {
				return fmt.Errorf("eventqueue: pending batch %s: record %q: %w", part[i], str, err)
			}
			out[part[i]] = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForgetPending deletes the records of tenantID's pending batches ids, once they are settled
// in the database: no append or claim of them comes any more.
func (s *Store) ForgetPending(ctx context.Context, tenantID uint64, ids []string) error {
	return pendingChunks(tenantID, ids, func(_, keys []string) error {
		if err := s.rdb.Unlink(ctx, keys...).Err(); err != nil {
			return fmt.Errorf("eventqueue: forget pending batches: %w", err)
		}
		return nil
	})
}

// pendingChunks calls fn with each run of at most maxScriptEvents of ids and their PendingKeys,
// one command's worth, and stops at its first error.
func pendingChunks(tenantID uint64, ids []string, fn func(part, keys []string) error) error {
	for start := 0; start < len(ids); start += maxScriptEvents {
		part := ids[start:min(start+maxScriptEvents, len(ids))]
		keys := make([]string, len(part))
		for i, id := range part {
			keys[i] = PendingKey(tenantID, id)
		}
		if err := fn(part, keys); err != nil {
			return err
		}
	}
	return nil
}
