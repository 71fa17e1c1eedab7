package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ingestion spool. While the database cannot be reached, accepted tracking requests are
// kept here, durably (Redis's AOF), until the worker stores them: one list per tenant
// (SpoolKey, in the tenant's slot, oldest first, one entry per request), the set of tenants
// with a spool (SpoolTenantsKey) and a count of the events spooled (SpoolEventsKey), which
// bounds the spool. Spooling a request also sets the tenant's hold mark (HeldKey), so that
// events stored directly once the database is back are held behind the spooled ones and enter
// the queue after them.

// SpoolTenantsKey is the set of tenants that may have spooled requests.
const SpoolTenantsKey = "eventq:spool:tenants"

// SpoolEventsKey counts the events in every tenant's spool.
const SpoolEventsKey = "eventq:spool:events"

// SpoolBytesKey counts the bytes of every tenant's spooled entries.
const SpoolBytesKey = "eventq:spool:bytes"

// SpoolTenantEventsKey counts the events in tenantID's spool, in the tenant's slot.
func SpoolTenantEventsKey(tenantID uint64) string { return tenantKey(tenantID, "spool:events") }

// spoolLockKey is held by the worker that drains the spool.
const spoolLockKey = "eventq:spool:lock"

// ErrSpoolFull is returned by Spool when the spool holds its most events or bytes, or the
// tenant its most events.
var ErrSpoolFull = errors.New("eventqueue: the ingestion spool is full")

// SpoolLimits bound the spool: its events and bytes in all, and one tenant's events, so that
// one site key cannot fill it for every tenant.
type SpoolLimits struct {
	Events, TenantEvents, Bytes int64
}

// spoolPush: KEYS spool, hold mark, tenant's event count; ARGV entry, events, the tenant's
// most events. Appends the entry, bumps the hold mark and counts the events, unless the
// tenant would then hold more than its most (-1, nothing done).
var spoolPush = redis.NewScript(`
local n = redis.call('INCRBY', KEYS[3], ARGV[2])
if n > tonumber(ARGV[3]) then
  redis.call('DECRBY', KEYS[3], ARGV[2])
  return -1
end
redis.call('INCR', KEYS[2])
return redis.call('RPUSH', KEYS[1], ARGV[1])
`)

// Spool appends one accepted request of tenantID (entry, n events) to its spool, unless the
// spool would then hold more than lim allows in all or for the tenant (ErrSpoolFull). It
// returns once the entry is in Redis; the tenant's hold mark is set first and the tenant
// recorded after, so that a crash between the steps leaves nothing unseen by DrainSpool's
// callers (a mark without a spooled request is released by the held events' drain).
func (s *Store) Spool(ctx context.Context, tenantID uint64, entry []byte, n int, lim SpoolLimits) error {
	pipe := s.rdb.Pipeline()
	total := pipe.IncrBy(ctx, SpoolEventsKey, int64(n))
	size := pipe.IncrBy(ctx, SpoolBytesKey, int64(len(entry)))
	if _, err := pipe.Exec(ctx); err != nil {
		s.uncount(ctx, total, size, n, len(entry))
		return fmt.Errorf("eventqueue: spool: %w", err)
	}
	var err error
	if total.Val() > lim.Events || size.Val() > lim.Bytes {
		err = ErrSpoolFull
	} else if err = s.NoteHeld(ctx, tenantID); err == nil {
		var pushed int64
		pushed, err = spoolPush.Run(ctx, s.rdb, []string{SpoolKey(tenantID), HeldKey(tenantID), SpoolTenantEventsKey(tenantID)},
			entry, n, lim.TenantEvents).Int64()
		if err == nil && pushed < 0 {
			err = ErrSpoolFull
		}
	}
	if err != nil { // not spooled: the counts go back
		s.uncount(ctx, total, size, n, len(entry))
		if errors.Is(err, ErrSpoolFull) {
			return err
		}
		return fmt.Errorf("eventqueue: spool: %w", err)
	}
	if err := s.rdb.SAdd(ctx, SpoolTenantsKey, tenantID).Err(); err != nil {
		return fmt.Errorf("eventqueue: spool: %w", err)
	}
	return nil
}

// uncount takes back the global counts a failed Spool added (those whose increment answered).
func (s *Store) uncount(ctx context.Context, total, size *redis.IntCmd, n, bytes int) {
	ctx = context.WithoutCancel(ctx)
	pipe := s.rdb.Pipeline()
	if total.Err() == nil {
		pipe.DecrBy(ctx, SpoolEventsKey, int64(n))
	}
	if size.Err() == nil {
		pipe.DecrBy(ctx, SpoolBytesKey, int64(bytes))
	}
	pipe.Exec(ctx)
}

// SpoolTenants lists the tenants that may have spooled requests.
func (s *Store) SpoolTenants(ctx context.Context) ([]uint64, error) {
	var ids []uint64
	if err := s.rdb.SMembers(ctx, SpoolTenantsKey).ScanSlice(&ids); err != nil {
		return nil, fmt.Errorf("eventqueue: spool: %w", err)
	}
	return ids, nil
}

// SpoolRange returns up to limit of tenantID's spooled requests from offset on, oldest first.
func (s *Store) SpoolRange(ctx context.Context, tenantID uint64, offset, limit int) ([]string, error) {
	out, err := s.rdb.LRange(ctx, SpoolKey(tenantID), int64(offset), int64(offset+limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("eventqueue: spool: %w", err)
	}
	return out, nil
}

// SpoolDrop removes tenantID's oldest count spooled requests, holding events events and
// bytes bytes in all, once they are stored, and returns how many requests are left.
func (s *Store) SpoolDrop(ctx context.Context, tenantID uint64, count, events, bytes int) (left int64, err error) {
	pipe := s.rdb.TxPipeline()
	pipe.LTrim(ctx, SpoolKey(tenantID), int64(count), -1)
	pipe.DecrBy(ctx, SpoolTenantEventsKey(tenantID), int64(events))
	llen := pipe.LLen(ctx, SpoolKey(tenantID))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("eventqueue: spool: %w", err)
	}
	global := s.rdb.Pipeline()
	global.DecrBy(ctx, SpoolEventsKey, int64(events))
	global.DecrBy(ctx, SpoolBytesKey, int64(bytes))
	if _, err := global.Exec(ctx); err != nil {
		return 0, fmt.Errorf("eventqueue: spool: %w", err)
	}
	return llen.Val(), nil
}

// Spooled reports whether tenantID has spooled requests not yet stored.
func (s *Store) Spooled(ctx context.Context, tenantID uint64) (bool, error) {
	n, err := s.rdb.LLen(ctx, SpoolKey(tenantID)).Result()
	if err != nil {
		return false, fmt.Errorf("eventqueue: spool: %w", err)
	}
	return n > 0, nil
}

// spoolZero: KEYS spool, tenant's event count. Drops the count when the spool is empty (what
// a crash between a drop and its count's decrement left).
var spoolZero = redis.NewScript(`
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
return 0
`)

// SpoolForget removes tenantID from SpoolTenantsKey once its spool is empty. A request spooled
// meanwhile puts it back (Spool records the tenant after its entry), and so does this check.
func (s *Store) SpoolForget(ctx context.Context, tenantID uint64) error {
	if err := s.rdb.SRem(ctx, SpoolTenantsKey, tenantID).Err(); err != nil {
		return fmt.Errorf("eventqueue: spool: %w", err)
	}
	if err := spoolZero.Run(ctx, s.rdb, []string{SpoolKey(tenantID), SpoolTenantEventsKey(tenantID)}).Err(); err != nil {
		return fmt.Errorf("eventqueue: spool: %w", err)
	}
	if more, err := s.Spooled(ctx, tenantID); err != nil || !more {
		return err
	}
	return s.rdb.SAdd(ctx, SpoolTenantsKey, tenantID).Err()
}

// SpoolEvents is how many events the spool holds (the count Spool bounds).
func (s *Store) SpoolEvents(ctx context.Context) (int64, error) {
	n, err := s.rdb.Get(ctx, SpoolEventsKey).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("eventqueue: spool: %w", err)
	}
	return max(n, 0), nil
}

// SpoolResetCount sets the spool's event and byte counts to 0 when no tenant has a spool (a count left
// behind by a crash between a drop and its count's decrement).
func (s *Store) SpoolResetCount(ctx context.Context) error {
	if n, err := s.rdb.SCard(ctx, SpoolTenantsKey).Result(); err != nil || n > 0 {
		return err
	}
	pipe := s.rdb.Pipeline()
	pipe.Set(ctx, SpoolEventsKey, 0, 0)
	pipe.Set(ctx, SpoolBytesKey, 0, 0)
	_, err := pipe.Exec(ctx)
	return err
}

// unlockScript (for every lock of this file): KEYS lock; ARGV owner. Deletes the lock if
// owner holds it.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// LockSpool takes the spool's drain lock for ttl as owner (or extends it when owner holds it),
// and reports whether owner holds it. One process across all workers drains the spool.
func (s *Store) LockSpool(ctx context.Context, owner string, ttl time.Duration) (bool, error) {
	return s.lock(ctx, spoolLockKey, owner, ttl)
}

// UnlockSpool releases the drain lock if owner holds it.
func (s *Store) UnlockSpool(ctx context.Context, owner string) error {
	return unlockScript.Run(ctx, s.rdb, []string{spoolLockKey}, owner).Err()
}

// LockHeldDrain takes tenantID's held-drain lock for ttl as owner and reports whether owner
// holds it: held events go in in order only if one process appends them at a time.
func (s *Store) LockHeldDrain(ctx context.Context, tenantID uint64, owner string, ttl time.Duration) (bool, error) {
	return s.lock(ctx, drainLockKey(tenantID), owner, ttl)
}

// UnlockHeldDrain releases tenantID's held-drain lock if owner holds it.
func (s *Store) UnlockHeldDrain(ctx context.Context, tenantID uint64, owner string) error {
	return unlockScript.Run(ctx, s.rdb, []string{drainLockKey(tenantID)}, owner).Err()
}

// Held reports whether tenantID has a hold mark: its new events wait in the database.
func (s *Store) Held(ctx context.Context, tenantID uint64) (bool, error) {
	n, err := s.rdb.Exists(ctx, HeldKey(tenantID)).Result()
	return n > 0, err
}

// lock takes key for ttl as owner, or extends it when owner holds it, and reports whether
// owner holds it.
func (s *Store) lock(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, key, owner, ttl).Result()
	if err != nil || ok {
		return ok, err
	}
	cur, err := s.rdb.Get(ctx, key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	if cur != owner {
		return false, nil
	}
	return true, s.rdb.PExpire(ctx, key, ttl).Err()
}
