// Package eventqueue is the per-tenant event queue in Redis: append at the back, read the
// front without removing, trim a counted prefix.
package eventqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// MaxRead is the most events one Read returns.
const MaxRead = 10000

// Store keeps one Redis list per tenant. Each element is an event's final JSON bytes.
type Store struct {
	rdb  redis.UniversalClient
	fast *lrangeReader // nil: every read goes through go-redis
	// hints holds a leaseHint by tenant id: one entry per tenant whose queue is leased.
	hints sync.Map
	// batches signs and checks batch ids (batchsign.go).
	batches batchSigner
	// MaxLength is the most events AppendOnce lets one queue hold (EVENTQUEUE_MAX_LENGTH);
	// 0 means no limit. Set it before use.
	MaxLength int64
	// MaxPageBytes is the most bytes of events one page holds (QUEUE_PAGE_MAX_BYTES); 0 means
	// DefaultMaxPageBytes. Set it before use.
	MaxPageBytes int64
}

func (s *Store) maxLength() int64 {
	if s.MaxLength <= 0 {
		return math.MaxInt64 >> 11 // exactly representable in Lua's doubles
	}
	return s.MaxLength
}

// New returns a Store on rdb (the connection named by EVENTQUEUE_QUEUE_CONNECTION). Close
// releases the read path's own connections; rdb stays the caller's to close.
func New(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb, fast: newLRangeReader(rdb)} }

// NewCapped is New with MaxLength set to maxLength.
func NewCapped(rdb redis.UniversalClient, maxLength int64) *Store {
	s := New(rdb)
	s.MaxLength = maxLength
	return s
}

// Close closes the idle connections of the read path.
func (s *Store) Close() {
	if s.fast != nil {
		s.fast.close()
	}
}

// DefaultMaxPageBytes is the most bytes of events one page holds when Store.MaxPageBytes is 0.
const DefaultMaxPageBytes = 8 << 20

func (s *Store) maxPageBytes() int64 {
	if s.MaxPageBytes <= 0 {
		return DefaultMaxPageBytes
	}
	return s.MaxPageBytes
}

// pageSource: KEYS list, offset; ARGV limit, max bytes. Returns {the front offset (nil when
// unset), the first events of the list: at most limit, at most max bytes with a comma between
// each, and at least one}. The list is read in slices, so that a page of large events costs
// Redis what its bytes cost and no reply, however large the events, is over max bytes (but
// for one event larger than that): a client that reads its answer slowly holds no more than
// that in Redis's output buffer.
const pageSource = `
local limit, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, size, from = {}, -1, 0
while from < limit do
  local slice = redis.call('LRANGE', KEYS[1], from, math.min(from + 255, limit - 1))
  for _, e in ipairs(slice) do
    size = size + #e + 1
    if size > budget and #out > 0 then
      return {redis.call('GET', KEYS[2]), out}
    end
    out[#out + 1] = e
  end
  if #slice < 256 then break end
  from = from + 256
end
return {redis.call('GET', KEYS[2]), out}
`

var pageScript = redis.NewScript(pageSource)

// OpenPage returns up to limit (at most MaxRead) events from the front of the queue, and at
// most MaxPageBytes of them (never none when the queue has one), oldest first, without
// removing them, and the queue's front offset, read in the same step (see respConn.open), the
// reply parsed as it arrives and the events never decoded nor copied (see Page). The page may come
// back while its events are still arriving (Page.Pending): the caller streams them
// (Page.Stream) or waits for them (Page.Fill), and releases the page.
func (s *Store) OpenPage(ctx context.Context, tenantID uint64, limit int) (*Page, error) {
	if limit <= 0 || limit > MaxRead {
		limit = MaxRead
	}
	if s.fast != nil {
		page, err := s.fast.open(ctx, Key(tenantID), OffsetKey(tenantID), SizeKey(tenantID), limit, s.maxPageBytes())
		if !errors.Is(err, errUseClient) {
			if err != nil {
				return nil, fmt.Errorf("eventqueue: read: %w", err)
			}
			return page, nil
		}
	}
	// A client the fast path does not mirror, or a cluster redirect: go-redis, copied once.
	res, err := pageScript.Run(ctx, s.rdb, []string{Key(tenantID), OffsetKey(tenantID)}, limit, s.maxPageBytes()).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("script answered %d values", len(res))
	}
	if err != nil {
		return nil, fmt.Errorf("eventqueue: read: %w", err)
	}
	events, _ := res[1].([]any)
	page := &Page{Count: len(events)}
	if o, ok := res[0].(string); ok {
		if page.Offset, err = strconv.ParseInt(o, 10, 64); err != nil {
			return nil, fmt.Errorf("eventqueue: read: offset: %w", err)
		}
	}
	var out bytes.Buffer
	for i, e := range events {
		if i > 0 {
			out.WriteByte(',')
		}
		str, _ := e.(string)
		out.WriteString(str)
	}
	page.add(out.Bytes())
	return page, nil
}

// Trimmed is what Trim did.
type Trimmed struct {
	Count  int64  // events removed
	Front  int64  // the front offset afterwards
	LastID string // id of the last event removed, "" when none was or it had no id
}

// ErrOffsetAhead is Trim's error when the caller's offset is beyond the queue's front: the
// queue was lost or rebuilt since the caller read it. Front is the current front offset.
type ErrOffsetAhead struct{ Front int64 }

func (e *ErrOffsetAhead) Error() string {
	return fmt.Sprintf("eventqueue: offset beyond the front (%d)", e.Front)
}

// trim: KEYS list, offset, lease state, lease expiry, acked, gone, then the four range keys
// (lease_ranges.go); ARGV count, the caller's
// offset or "", GoneRetention ms. Removes the first count events, or with an offset O those up to absolute
// position O+count not removed yet, and advances the front offset by what it removed. The
// leases of removed events end (their ids answer "trimmed"); their acknowledgements go.
// Returns {removed, front, id of the last removed event or nil}, or {-1, front} when O is
// beyond the front.
var trim = redis.NewScript(luaRanges + `
local front = tonumber(redis.call('GET', KEYS[2]) or '0')
local n = tonumber(ARGV[1])
if ARGV[2] ~= '' then
  local o = tonumber(ARGV[2])
  if o > front then
    return {-1, front}
  end
  n = o + n - front
end
n = math.min(n, redis.call('LLEN', KEYS[1]))
if n <= 0 then
  return {0, front}
end
-- leases by range of the removed events become per-event leases, ended below
splitRangesBefore(KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[3], KEYS[4], KEYS[5], front + n, front)
local last = redis.call('LINDEX', KEYS[1], n - 1)
redis.call('LTRIM', KEYS[1], n, -1)
front = redis.call('INCRBY', KEYS[2], n)
if redis.call('ZCARD', KEYS[4]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    if tonumber(m) < front then
      redis.call('ZREM', KEYS[4], m)
      redis.call('HDEL', KEYS[3], m)
      redis.call('ZADD', KEYS[6], now, m)
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - tonumber(ARGV[3]))
end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. front)
return {n, front, string.match(last, '^{"id":"([^"]*)"') or false}
`)

// Trim removes the first count events, atomically; events behind them stay, whenever they
// arrived. With offset ≥ 0 (a read's Page.Offset), it removes only the events up to absolute
// position offset+count that are still there, so a retried Trim removes nothing more; an
// offset beyond the front is *ErrOffsetAhead. offset < 0 trims count events unconditionally.
// Trimming more than the queue holds empties it. The leases of the removed events end.
func (s *Store) Trim(ctx context.Context, tenantID uint64, count, offset int64) (Trimmed, error) {
	arg := ""
	if offset >= 0 {
		arg = strconv.FormatInt(offset, 10)
	}
	keys := []string{Key(tenantID), OffsetKey(tenantID), LeaseStateKey(tenantID), LeaseExpiryKey(tenantID), AckedKey(tenantID), GoneKey(tenantID),
		LeaseRangesKey(tenantID), LeaseRangeStartKey(tenantID), LeaseRangeExpiryKey(tenantID), LeaseRangeHeldKey(tenantID)}
	res, err := trim.Run(ctx, s.rdb, keys, count, arg, GoneRetention.Milliseconds()).Slice()
	if err != nil {
		return Trimmed{}, fmt.Errorf("eventqueue: trim: %w", err)
	}
	if len(res) < 2 {
		return Trimmed{}, fmt.Errorf("eventqueue: trim: script answered %v", res)
	}
	n, _ := res[0].(int64)
	front, _ := res[1].(int64)
	if n < 0 {
		return Trimmed{}, &ErrOffsetAhead{Front: front}
	}
	out := Trimmed{Count: n, Front: front}
	if len(res) > 2 {
		out.LastID, _ = res[2].(string)
	}
	return out, nil
}

// Offset returns tenantID's front offset.
func (s *Store) Offset(ctx context.Context, tenantID uint64) (int64, error) {
	n, err := s.rdb.Get(ctx, OffsetKey(tenantID)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("eventqueue: offset: %w", err)
	}
	return n, nil
}

// Len returns the queue's length.
func (s *Store) Len(ctx context.Context, tenantID uint64) (int64, error) {
	n, err := s.rdb.LLen(ctx, Key(tenantID)).Result()
	if err != nil {
		return 0, fmt.Errorf("eventqueue: len: %w", err)
	}
	return n, nil
}
