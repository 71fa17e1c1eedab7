package eventqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redaction rewrites events of a tenant's queue and dead letters in place (an erasure): each
// keeps its position, so offsets, leases and trims go on as before. The lists are walked in
// steps of RedactStep elements: one script reads a step by absolute position (the front may
// move between steps, as consumers trim), the caller decides what each element becomes, and
// a second script writes an element only where it still is, unchanged. Redis runs no script
// of the walk for longer than a step takes, whatever the queue's length.

// RedactStep is how many elements one step reads and rewrites. A step's LINDEX and LSET walk
// the list from its nearer end, so a step in the middle of a long queue costs far more than
// its size: a large step in the middle of a long queue holds Redis long enough for every
// other client's command to wait behind it. After each step that wrote, the walk pauses as
// long as the step took, so that the walk has half of Redis at most.
const RedactStep = 25

// redactRead returns {position of the first element returned, elements…} for up to ARGV[2]
// elements from absolute position ARGV[1] of the list KEYS[1], whose front offset is in
// KEYS[2] (no KEYS[2], or a missing offset key: 0; the dead letters are addressed by index).
var redactRead = redis.NewScript(`
local off = 0
if KEYS[2] then off = tonumber(redis.call('GET', KEYS[2]) or '0') end
local i = tonumber(ARGV[1]) - off
if i < 0 then i = 0 end
local out = {tostring(off + i)}
local els = redis.call('LRANGE', KEYS[1], i, i + tonumber(ARGV[2]) - 1)
for _, e in ipairs(els) do out[#out + 1] = e end
return out
`)

// redactWrite sets, for each triple (position, old, new) of ARGV, the element at that absolute
// position of KEYS[1] (front offset in KEYS[2], as for redactRead) to new if it is still old;
// returns how many it set. KEYS[3], when given, is the list's largest size (SizeKey): a
// rewritten element larger than it raises it.
var redactWrite = redis.NewScript(luaNoteSize + `
local off = 0
if KEYS[2] then off = tonumber(redis.call('GET', KEYS[2]) or '0') end
local n, set = 0, {}
for k = 1, #ARGV, 3 do
  local i = tonumber(ARGV[k]) - off
  if i >= 0 and redis.call('LINDEX', KEYS[1], i) == ARGV[k + 1] then
    redis.call('LSET', KEYS[1], i, ARGV[k + 2])
    n = n + 1
    set[n] = ARGV[k + 2]
  end
end
if KEYS[3] then noteSize(KEYS[3], set) end
return n
`)

// Rewrite is what a redaction makes of one element: the new bytes and true to change it.
type Rewrite func(element []byte) ([]byte, bool)

// RedactQueue walks tenantID's queue from its front to its back and rewrites the elements
// rewrite changes, returning how many it rewrote. An element refused by the write's compare
// was trimmed meanwhile (queue elements never move): there is nothing left to redact.
func (s *Store) RedactQueue(ctx context.Context, tenantID uint64, rewrite Rewrite) (int, error) {
	n, _, err := s.redactList(ctx, []string{Key(tenantID), OffsetKey(tenantID), SizeKey(tenantID)}, rewrite)
	return n, err
}

// maxDeadPasses bounds RedactDeadLetters' walks: each one after the first follows dead letters
// dropped from the front during the walk before, which needs a lease or a prune each time.
const maxDeadPasses = 100

// RedactDeadLetters does the same for tenantID's dead letters ({"offset","deliveries","event"}
// each; rewrite gets the whole element). The dead letters have no offset key: positions are
// indexes, and a dead letter dropped from the front during a walk shifts the rest, so that the
// write's compare refuses some; the walk is then made again, until one is refused nothing
// (rewrite must return false for an element it made).
func (s *Store) RedactDeadLetters(ctx context.Context, tenantID uint64, rewrite Rewrite) (int, error) {
	total := 0
	for range maxDeadPasses {
		n, refused, err := s.redactList(ctx, []string{DeadKey(tenantID)}, rewrite)
		total += n
		if err != nil || refused == 0 {
			return total, err
		}
	}
	return total, fmt.Errorf("eventqueue: redact dead letters: still moving after %d walks", maxDeadPasses)
}

// redactList walks the list keys[0] (front offset in keys[1], if given) and returns how many
// elements it rewrote and how many the write's compare refused.
func (s *Store) redactList(ctx context.Context, keys []string, rewrite Rewrite) (written, refused int, err error) {
	pos := int64(0)
	for {
		res, err := redactRead.Run(ctx, s.rdb, keys, pos, RedactStep).StringSlice()
		if err != nil {
			return written, refused, fmt.Errorf("eventqueue: redact read: %w", err)
		}
		if len(res) <= 1 {
			return written, refused, nil
		}
		var first int64
		fmt.Sscan(res[0], &first)
		var args []any
		for i, el := range res[1:] {
			if nw, ok := rewrite([]byte(el)); ok {
				args = append(args, first+int64(i), el, nw)
			}
		}
		if len(args) > 0 {
			started := time.Now()
			n, err := redactWrite.Run(ctx, s.rdb, keys, args...).Int()
			if err != nil {
				return written, refused, fmt.Errorf("eventqueue: redact write: %w", err)
			}
			written += n
			refused += len(args)/3 - n
			select {
			case <-ctx.Done():
				return written, refused, ctx.Err()
			case <-time.After(time.Since(started)):
			}
		}
		pos = first + int64(len(res)-1)
	}
}
