package eventqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exactly-once appends. The database marks an event pending until it is known to be in its
// queue; the mark is cleared after the append, so a crash or a lost reply between the two
// leaves an event that is in the queue but still marked, and the re-pusher would append it
// again. To make re-pushing idempotent, each tenant has a sorted set of the ids appended to
// its queue, written by the same script as the append: an id already in the set is not
// appended again. Entries are kept as long as the database may still call the event pending:
//
//   - an entry starts with its append time as score and lives Retention: long enough for a
//     re-pusher to find the event pending after any crash, unless the worker is down longer;
//   - once the pending mark is cleared (ShortenDedup), its score is moved so that it expires DedupGrace
//     later: a re-pusher that read the event as pending just before has that long to push it.
//
// So the set holds about (append rate × DedupGrace) entries, plus those of crashed appends.
const (
	Retention  = 24 * time.Hour
	DedupGrace = 10 * time.Second
)

// Event is one event to append: its id, the deduplication key, and its queue JSON.
type Event struct {
	ID   string
	JSON []byte
}

// Batch is events of one tenant to append together.
type Batch struct {
	TenantID uint64
	Events   []Event
	// Pending, when set, names the pending batches the events were committed with, in the
	// events' order, each with its number of events: the append is then deduplicated per
	// pending batch (PendingKey), not per event, and records nothing per event.
	Pending []Span
}

// Span is a run of a Batch's events committed with one pending batch.
type Span struct {
	ID string // the pending batch's id
	N  int    // how many of the events are its
}

// HeldTenantsKey is the set of tenants with a hold mark, for the re-pusher to find them. It is
// not in the tenants' slots: it is kept beside the scripts, not by them.
const HeldTenantsKey = "eventqueue:held-tenants"

// appendOnce: KEYS list, appended set, hold mark, wake channel, rebuild lock, lease wait mark;
// ARGV now (ms),
// retention (ms), max length, force (1: the caller is draining held events in order), then id,
// JSON pairs. During a rebuild, or without force and with a hold mark, every event is held. Otherwise events whose id is in the
// set are skipped, the others appended in order while the list is shorter than max length,
// and from the first that does not fit on, all are held (the hold mark is bumped). Appending
// to an empty list, or while a lease call waits (LeaseWaitKey), publishes on the wake channel,
// for readers waiting on it (see Waiter). Returns
// {appended, held, marked}: held events are the last ones; marked is 1 when a hold mark exists.
var appendOnce = redis.NewScript(`
local now, retention, maxlen, force = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local n = (#ARGV - 4) / 2
if redis.call('EXISTS', KEYS[5]) == 1 or (not force and redis.call('EXISTS', KEYS[3]) == 1) then
  redis.call('INCR', KEYS[3])
  return {0, n, 1}
end
local ids = {}
for i = 1, n do
  ids[i] = ARGV[3 + 2 * i]
end
local seen = redis.call('ZMSCORE', KEYS[2], unpack(ids))
local length = redis.call('LLEN', KEYS[1])
local room = maxlen - length
local fresh, entries, held = {}, {}, 0
for i = 1, n do
  if not seen[i] then
    if #fresh >= room then
      held = n - i + 1
      break
    end
    fresh[#fresh + 1] = ARGV[4 + 2 * i]
    entries[#entries + 1] = now
    entries[#entries + 1] = ids[i]
  end
end
if #fresh > 0 then
  redis.call('ZADD', KEYS[2], unpack(entries))
  redis.call('RPUSH', KEYS[1], unpack(fresh))
  if length == 0 or redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call('SPUBLISH', KEYS[4], '1')
  end
end
if held > 0 then
  redis.call('INCR', KEYS[3])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - retention)
redis.call('PEXPIRE', KEYS[2], retention)
return {#fresh, held, redis.call('EXISTS', KEYS[3])}
`)

// appendPending: KEYS list, hold mark, wake channel, rebuild lock, lease wait mark, then one
// PendingKey per span; ARGV retention (ms), max length, each span's event count, then the
// events' JSON. appendOnce for events committed with pending batches: a span whose key exists
// (appended, or claimed) is skipped whole; the others are appended as appendOnce does (held
// from the first that does not fit, or all during a rebuild or behind a hold mark), and each
// one's key records how many of its events went in. Returns {appended, held, marked, then the
// 1-based numbers of the skipped spans}.
var appendPending = redis.NewScript(`
local retention, maxlen = ARGV[1], tonumber(ARGV[2])
local spans = #KEYS - 5
local holdAll = redis.call('EXISTS', KEYS[4]) == 1 or redis.call('EXISTS', KEYS[2]) == 1
local length = redis.call('LLEN', KEYS[1])
local room = maxlen - length
local fresh, held, skipped = {}, 0, {}
local pos = 3 + spans
for s = 1, spans do
  local n = tonumber(ARGV[2 + s])
  if redis.call('EXISTS', KEYS[5 + s]) == 1 then
    skipped[#skipped + 1] = s
  else
    local c = 0
    if not holdAll and held == 0 then
      c = math.min(n, math.max(room - #fresh, 0))
      for i = 0, c - 1 do
        fresh[#fresh + 1] = ARGV[pos + i]
      end
    end
    held = held + n - c
    redis.call('SET', KEYS[5 + s], c, 'PX', retention)
  end
  pos = pos + n
end
if #fresh > 0 then
  redis.call('RPUSH', KEYS[1], unpack(fresh))
  if length == 0 or redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('SPUBLISH', KEYS[3], '1')
  end
end
if held > 0 then
  redis.call('INCR', KEYS[2])
end
return {#fresh, held, redis.call('EXISTS', KEYS[2]), unpack(skipped)}
`)

// claimPending: KEYS a PendingKey; ARGV retention (ms). Returns the key's count, after setting
// it to -1 if it had none.
var claimPending = redis.NewScript(`
if redis.call('SET', KEYS[1], -1, 'NX', 'PX', ARGV[1]) then
  return -1
end
return tonumber(redis.call('GET', KEYS[1]))
`)

// releaseHold: KEYS hold mark; ARGV the mark's value when the caller found nothing held.
// Deletes the mark only if no event was held since.
var releaseHold = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// shortenDedup: KEYS appended set; ARGV expiry score, then ids. Existing entries only.
var shortenDedup = redis.NewScript(`
local entries = {}
for i = 2, #ARGV do
  entries[#entries + 1] = ARGV[1]
  entries[#entries + 1] = ARGV[i]
end
return redis.call('ZADD', KEYS[1], 'XX', 'LT', unpack(entries))
`)

// maxScriptEvents bounds the events of one script call (Lua's unpack has a stack limit).
const maxScriptEvents = 1000

// Outcome is what AppendOnce did with one batch.
type Outcome struct {
	Appended int      // events appended; the others were in the queue already, or held
	Held     int      // the batch's last Held events were held back: they stay pending
	Marked   bool     // the tenant has a hold mark: events of it wait in the database
	Skipped  []string // pending batches not appended: they were appended or claimed before
	Err      error    // nil when every event of the batch is in the queue or held
}

// AppendOnce appends each batch to its tenant's queue in order, skipping every event whose id
// was appended before (see Retention), so appending the same events again is a no-op. A queue
// never grows beyond MaxLength: the events that do not fit are held (Outcome.Held), and so are
// all later ones of the tenant until Drain has put the held ones in, so none is overtaken.
// Each batch is atomic; all go in one pipeline round trip. out[i] is batch i's outcome: one
// batch's failure does not fail the others. now is the caller's clock, which ages the
// deduplication entries.
func (s *Store) AppendOnce(ctx context.Context, now time.Time, batches []Batch) (out []Outcome) {
	return s.appendOnce(ctx, now, batches, false)
}

// Drain is AppendOnce for the re-pusher, which appends held events in their order: it
// appends while there is room, whether or not the tenant has a hold mark.
func (s *Store) Drain(ctx context.Context, now time.Time, b Batch) Outcome {
	return s.appendOnce(ctx, now, []Batch{b}, true)[0]
}

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

// HeldTenants lists the tenants recorded in HeldTenantsKey.
func (s *Store) HeldTenants(ctx context.Context) ([]uint64, error) {
	var ids []uint64
	err := s.rdb.SMembers(ctx, HeldTenantsKey).ScanSlice(&ids)
	return ids, err
}

func (s *Store) appendOnce(ctx context.Context, now time.Time, batches []Batch, force bool) (out []Outcome) {
	forceArg := 0
	if force {
		forceArg = 1
	}
	type call struct {
		batch  int
		script *redis.Script
		keys   []string
		args   []any
		spans  []Span // the spans of a pending call
	}
	var calls []call
	for i, b := range batches {
		base := []string{Key(b.TenantID), HeldKey(b.TenantID), WakeChannel(b.TenantID), RebuildKey(b.TenantID), LeaseWaitKey(b.TenantID)}
		if len(b.Pending) > 0 {
			// Whole spans per call: a span's key is written once, by the call that has it.
			events := b.Events
			for start := 0; start < len(b.Pending); {
				end, n := start, 0
				for end < len(b.Pending) && (end == start || n+b.Pending[end].N <= maxScriptEvents) {
					n += b.Pending[end].N
					end++
				}
				spans := b.Pending[start:end]
				keys := append(append(make([]string, 0, len(base)+len(spans)), base...), make([]string, len(spans))...)
				args := make([]any, 0, 2+len(spans)+n)
				args = append(args, Retention.Milliseconds(), s.maxLength())
				for j, sp := range spans {
					keys[len(base)+j] = PendingKey(b.TenantID, sp.ID)
					args = append(args, sp.N)
				}
				for _, e := range events[:n] {
					args = append(args, e.JSON)
				}
				events = events[n:]
				calls = append(calls, call{batch: i, script: appendPending, keys: keys, args: args, spans: spans})
				start = end
			}
			continue
		}
		keys := []string{base[0], AppendedKey(b.TenantID), base[1], base[2], base[3], base[4]}
		for start := 0; start < len(b.Events); start += maxScriptEvents {
			part := b.Events[start:min(start+maxScriptEvents, len(b.Events))]
			args := make([]any, 0, 4+2*len(part))
			args = append(args, now.UnixMilli(), Retention.Milliseconds(), s.maxLength(), forceArg)
			for _, e := range part {
				args = append(args, e.ID, e.JSON)
			}
			calls = append(calls, call{batch: i, script: appendOnce, keys: keys, args: args})
		}
	}
	out = make([]Outcome, len(batches))
	cmds := make([]*redis.Cmd, len(calls))
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { // each command carries its own error
		for i, c := range calls {
			cmds[i] = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	for i, c := range calls {
		cmd := cmds[i]
		if isNoScript(cmd.Err()) { // Redis restarted and forgot the script: send its source
			cmd = c.script.Eval(ctx, s.rdb, c.keys, c.args...)
		}
		res, err := cmd.Int64Slice()
		if err == nil && (len(res) < 3 || c.spans == nil && len(res) != 3) {
			err = fmt.Errorf("script answered %v", res)
		}
		if err != nil {
			if out[c.batch].Err == nil {
				out[c.batch].Err = fmt.Errorf("eventqueue: append: %w", err)
			}
			continue
		}
		o := &out[c.batch]
		o.Appended += int(res[0])
		o.Held += int(res[1])
		o.Marked = o.Marked || res[2] == 1
		for _, k := range res[3:] {
			if k < 1 || int(k) > len(c.spans) {
				o.Err = fmt.Errorf("eventqueue: append: script skipped span %d of %d", k, len(c.spans))
				break
			}
			o.Skipped = append(o.Skipped, c.spans[k-1].ID)
		}
	}
	return out
}

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

// ShortenDedup records that the database no longer calls these appended events of tenantID
// pending (nothing to do with a consumer's lease acknowledgements, Store.Settle):
// their deduplication entries expire DedupGrace after now instead of after Retention.
func (s *Store) ShortenDedup(ctx context.Context, now time.Time, tenantID uint64, ids []string) error {
	expireAt := now.Add(DedupGrace - Retention).UnixMilli()
	keys := []string{AppendedKey(tenantID)}
	for start := 0; start < len(ids); start += maxScriptEvents {
		part := ids[start:min(start+maxScriptEvents, len(ids))]
		args := make([]any, 0, 1+len(part))
		args = append(args, expireAt)
		for _, id := range part {
			args = append(args, id)
		}
		if err := shortenDedup.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("eventqueue: shorten dedup: %w", err)
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

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
		LeaseStateKey(tenantID), LeaseExpiryKey(tenantID), AckedKey(tenantID), GoneKey(tenantID), LeaseNextKey(tenantID), LeaseEpochKey(tenantID)}
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

// Appended reports, for each id, whether it is in tenantID's deduplication set: appended to
// its queue and either still pending in the database or acknowledged less than DedupGrace ago.
func (s *Store) Appended(ctx context.Context, tenantID uint64, ids []string) ([]bool, error) {
	out := make([]bool, 0, len(ids))
	for start := 0; start < len(ids); start += maxScriptEvents {
		part := ids[start:min(start+maxScriptEvents, len(ids))]
		scores, err := s.rdb.ZMScore(ctx, AppendedKey(tenantID), part...).Result()
		if err != nil {
			return nil, fmt.Errorf("eventqueue: appended: %w", err)
		}
		for _, sc := range scores {
			out = append(out, sc != 0)
		}
	}
	return out, nil
}
