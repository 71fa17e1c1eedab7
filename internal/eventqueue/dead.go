package eventqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dead letters. An event leased MaxDeliveries times goes to its tenant's dead letters
// (DeadKey, each {"offset","deliveries","event"}), and the time it went there is pushed to a
// second list (DeadAtKey) in the same order, so that both lists are trimmed together from the
// front: past DeadPolicy.Max the oldest go, and each goes once older than
// DeadPolicy.Retention. The bounds are applied by every script that adds, reads or counts dead
// letters, so a tenant's dead letters are bounded when anyone looks at them; PruneDeadLetters
// applies them to a tenant no one looks at.

// Defaults of DeadPolicy.
const (
	DefaultMaxDeadLetters      = 10000
	DefaultDeadLetterRetention = 14 * 24 * time.Hour
)

// DeadPolicy bounds a tenant's dead letters (EVENTQUEUE_MAX_DEAD_LETTERS,
// DEAD_LETTER_RETENTION). The zero value means the defaults.
type DeadPolicy struct {
	Max       int64         // most dead letters kept; 0 means DefaultMaxDeadLetters
	Retention time.Duration // how long one is kept; 0 means DefaultDeadLetterRetention
}

func (p DeadPolicy) max() int64 {
	if p.Max <= 0 {
		return DefaultMaxDeadLetters
	}
	return p.Max
}

func (p DeadPolicy) retention() time.Duration {
	if p.Retention <= 0 {
		return DefaultDeadLetterRetention
	}
	return p.Retention
}

// luaDead defines pruneDead(dead, at, max, retention ms): drops the oldest dead letters past
// max and those older than the retention, from both lists, and returns how many went. Dead
// letters of a version that kept no times get the time of the first prune that sees them.
// Needs now (luaPrelude or luaNow).
const luaDead = `
local function pruneDead(dk, ak, maxn, ret)
  local n = redis.call('LLEN', dk)
  local m = redis.call('LLEN', ak)
  while m < n do
    local fill = {}
    for i = 1, math.min(n - m, 1000) do fill[i] = now end
    redis.call('LPUSH', ak, unpack(fill))
    m = m + #fill
  end
  if m > n then
    redis.call('LTRIM', ak, m - n, -1)
  end
  local drop = math.max(n - maxn, 0)
  local cut = now - ret
  while drop < n do
    local ts = redis.call('LRANGE', ak, drop, drop + 255)
    local k = 0
    for _, v in ipairs(ts) do
      if tonumber(v) > cut then break end
      k = k + 1
    end
    drop = drop + k
    if k < #ts or #ts == 0 then break end
  end
  if drop > 0 then
    redis.call('LTRIM', dk, drop, -1)
    redis.call('LTRIM', ak, drop, -1)
  end
  return drop
end
`

const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// deadRead: KEYS dead, dead at; ARGV max, retention ms, limit (-1: none). Prunes, then
// returns {dropped, length, then up to limit dead letters}.
var deadRead = redis.NewScript(luaNow + luaDead + `
local dropped = pruneDead(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]))
local out = {dropped, redis.call('LLEN', KEYS[1])}
local limit = tonumber(ARGV[3])
if limit > 0 then
  for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, limit - 1)) do out[#out + 1] = v end
end
return out
`)

// DeadLetters returns up to limit of tenantID's dead letters, oldest first, each the JSON
// {"offset","deliveries","event"}, after dropping those policy no longer keeps (dropped).
func (s *Store) DeadLetters(ctx context.Context, tenantID uint64, limit int, policy DeadPolicy) (letters []string, dropped int64, err error) {
	res, err := s.readDead(ctx, tenantID, limit, policy)
	if err != nil {
		return nil, 0, err
	}
	letters = make([]string, 0, len(res)-2)
	for _, v := range res[2:] {
		str, _ := v.(string)
		letters = append(letters, str)
	}
	return letters, toInt(res[0]), nil
}

// PruneDeadLetters drops tenantID's dead letters that policy no longer keeps, atomically, and
// returns how many went and how many are left.
func (s *Store) PruneDeadLetters(ctx context.Context, tenantID uint64, policy DeadPolicy) (dropped, left int64, err error) {
	res, err := s.readDead(ctx, tenantID, 0, policy)
	if err != nil {
		return 0, 0, err
	}
	return toInt(res[0]), toInt(res[1]), nil
}

func (s *Store) readDead(ctx context.Context, tenantID uint64, limit int, policy DeadPolicy) ([]any, error) {
	res, err := deadRead.Run(ctx, s.rdb, []string{DeadKey(tenantID), DeadAtKey(tenantID)},
		policy.max(), policy.retention().Milliseconds(), limit).Slice()
	if err == nil && len(res) < 2 {
		err = fmt.Errorf("script answered %d values", len(res))
	}
	if err != nil {
		return nil, fmt.Errorf("eventqueue: dead letters: %w", err)
	}
	return res, nil
}

// deadDrop: KEYS dead, dead at; ARGV count. Removes the oldest count from both lists. The
// count is cut to the list's length before Redis sees it: a Lua number past 10^14 turns into
// text like 1e+17, which LTRIM refuses.
var deadDrop = redis.NewScript(`
local dead = redis.call('LLEN', KEYS[1])
local n = math.min(tonumber(ARGV[1]), dead)
redis.call('LTRIM', KEYS[1], n, -1)
redis.call('LTRIM', KEYS[2], math.max(n + redis.call('LLEN', KEYS[2]) - dead, 0), -1)
return 0
`)

// DropDeadLetters removes tenantID's oldest count dead letters, atomically.
func (s *Store) DropDeadLetters(ctx context.Context, tenantID uint64, count int64) error {
	if err := deadDrop.Run(ctx, s.rdb, []string{DeadKey(tenantID), DeadAtKey(tenantID)}, count).Err(); err != nil {
		return fmt.Errorf("eventqueue: dead letters: %w", err)
	}
	return nil
}

// leaseCounts: KEYS lease expiry, dead letters, dead at, lease ranges, range expiry; ARGV
// max, retention ms. Prunes the dead letters, then returns {live leases, dead letters}: the
// live leases of single events and the events held by live ranges.
var leaseCounts = redis.NewScript(luaNow + luaDead + luaRanges + `
pruneDead(KEYS[2], KEYS[3], tonumber(ARGV[1]), tonumber(ARGV[2]))
return {redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') + rangesHeld(KEYS[4], KEYS[5], now), redis.call('LLEN', KEYS[2])}
`)

// LeaseCounts returns how many of tenantID's events are under a live lease and how many dead
// letters policy keeps.
func (s *Store) LeaseCounts(ctx context.Context, tenantID uint64, policy DeadPolicy) (leased, dead int64, err error) {
	res, err := leaseCounts.Run(ctx, s.rdb, []string{LeaseExpiryKey(tenantID), DeadKey(tenantID), DeadAtKey(tenantID),
		LeaseRangesKey(tenantID), LeaseRangeExpiryKey(tenantID)},
		policy.max(), policy.retention().Milliseconds()).Int64Slice()
	if err != nil || len(res) != 2 {
		if err == nil {
			err = fmt.Errorf("script answered %v", res)
		}
		return 0, 0, fmt.Errorf("eventqueue: lease counts: %w", err)
	}
	return res[0], res[1], nil
}
