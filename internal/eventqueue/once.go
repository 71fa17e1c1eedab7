package eventqueue

import (
	"context"
	"fmt"
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

// AppendTimeout bounds a request's Redis round trip (its append, and the acknowledgements
// after it): past it the request is answered and its events stay pending for the re-pusher.
const AppendTimeout = 500 * time.Millisecond

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

// appendOnce: KEYS list, appended set, hold mark, wake channel, rebuild lock, lease wait mark,
// largest size (SizeKey, raised to the largest event appended); ARGV now (ms),
// retention (ms), max length, force (1: the caller is draining held events in order), then id,
// JSON pairs. During a rebuild, or without force and with a hold mark, every event is held. Otherwise events whose id is in the
// set are skipped, the others appended in order while the list is shorter than max length,
// and from the first that does not fit on, all are held (the hold mark is bumped). Appending
// to an empty list, or while a lease call waits (LeaseWaitKey), publishes on the wake channel,
// for readers waiting on it (see Waiter). Returns
// {appended, held, marked}: held events are the last ones; marked is 1 when a hold mark exists.
var appendOnce = redis.NewScript(luaNoteSize + `
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
  noteSize(KEYS[7], fresh, length == 0)
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

// appendPending: KEYS list, hold mark, wake channel, rebuild lock, lease wait mark, largest
// size (as appendOnce's), then one PendingKey per span; ARGV retention (ms), max length, each span's event count, then the
// events' JSON. appendOnce for events committed with pending batches: a span whose key exists
// (appended, or claimed) is skipped whole; the others are appended as appendOnce does (held
// from the first that does not fit, or all during a rebuild or behind a hold mark), and each
// one's key records how many of its events went in. Returns {appended, held, marked, then the
// 1-based numbers of the skipped spans}.
var appendPending = redis.NewScript(luaNoteSize + `
local retention, maxlen = ARGV[1], tonumber(ARGV[2])
local spans = #KEYS - 6
local holdAll = redis.call('EXISTS', KEYS[4]) == 1 or redis.call('EXISTS', KEYS[2]) == 1
local length = redis.call('LLEN', KEYS[1])
local room = maxlen - length
local fresh, held, skipped = {}, 0, {}
local pos = 3 + spans
for s = 1, spans do
  local n = tonumber(ARGV[2 + s])
  if redis.call('EXISTS', KEYS[6 + s]) == 1 then
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
    redis.call('SET', KEYS[6 + s], c, 'PX', retention)
  end
  pos = pos + n
end
if #fresh > 0 then
  redis.call('RPUSH', KEYS[1], unpack(fresh))
  noteSize(KEYS[6], fresh, length == 0)
  if length == 0 or redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('SPUBLISH', KEYS[3], '1')
  end
end
if held > 0 then
  redis.call('INCR', KEYS[2])
end
return {#fresh, held, redis.call('EXISTS', KEYS[2]), unpack(skipped)}
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

// luaNoteSize defines noteSize(key, events, fresh): raises the size at key to the largest of
// events, or with fresh (the list was empty before them) sets it to that; a page read uses it
// to choose how it reads (see respConn.open).
const luaNoteSize = `
local function noteSize(key, events, fresh)
  local m = 0
  for _, e in ipairs(events) do
    if #e > m then m = #e end
  end
  if fresh or m > tonumber(redis.call('GET', key) or '0') then
    redis.call('SET', key, m)
  end
end
`

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
		base := []string{Key(b.TenantID), HeldKey(b.TenantID), WakeChannel(b.TenantID), RebuildKey(b.TenantID), LeaseWaitKey(b.TenantID), SizeKey(b.TenantID)}
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
		keys := []string{base[0], AppendedKey(b.TenantID), base[1], base[2], base[3], base[4], base[5]}
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
