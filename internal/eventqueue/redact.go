package eventqueue

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Redaction rewrites events of a tenant's queue and dead letters in place (an erasure): each
// keeps its position, so offsets, leases and trims go on as before. The lists are walked in
// steps of RedactStep elements: one script reads a step by absolute position (the front may
// move between steps, as consumers trim), the caller decides what each element becomes, and
// a second script writes an element only where it still is, unchanged. Redis runs no script
// of the walk for longer than a step takes, whatever the queue's length.

// RedactStep is how many elements one step reads and rewrites.
const RedactStep = 100

// redactRead returns {position of the first element returned, elements…} for up to ARGV[2]
// elements from absolute position ARGV[1] of the list KEYS[1], whose front offset is in
// KEYS[2] (a missing offset key: 0, as for the dead letters, addressed by index).
var redactRead = redis.NewScript(`
local off = tonumber(redis.call('GET', KEYS[2]) or '0')
local i = tonumber(ARGV[1]) - off
if i < 0 then i = 0 end
local out = {tostring(off + i)}
local els = redis.call('LRANGE', KEYS[1], i, i + tonumber(ARGV[2]) - 1)
for _, e in ipairs(els) do out[#out + 1] = e end
return out
`)

// redactWrite sets, for each triple (position, old, new) of ARGV, the element at that absolute
// position of KEYS[1] (front offset in KEYS[2]) to new if it is still old; returns how many
// it set.
var redactWrite = redis.NewScript(`
local off = tonumber(redis.call('GET', KEYS[2]) or '0')
local n = 0
for k = 1, #ARGV, 3 do
  local i = tonumber(ARGV[k]) - off
  if i >= 0 and redis.call('LINDEX', KEYS[1], i) == ARGV[k + 1] then
    redis.call('LSET', KEYS[1], i, ARGV[k + 2])
    n = n + 1
  end
end
return n
`)

// Rewrite is what a redaction makes of one element: the new bytes and true to change it.
type Rewrite func(element []byte) ([]byte, bool)

// RedactQueue walks tenantID's queue from its front to its back and rewrites the elements
// rewrite changes, returning how many it rewrote.
func (s *Store) RedactQueue(ctx context.Context, tenantID uint64, rewrite Rewrite) (int, error) {
	return s.redactList(ctx, Key(tenantID), OffsetKey(tenantID), rewrite)
}

// RedactDeadLetters does the same for tenantID's dead letters ({"offset","deliveries","event"}
// each; rewrite gets the whole element).
func (s *Store) RedactDeadLetters(ctx context.Context, tenantID uint64, rewrite Rewrite) (int, error) {
	// The dead letters have no offset key: positions are indexes, and a dead letter dropped
	// from the front meanwhile shifts them; the write's compare then refuses, and the element
	// is found again by the next walk (Eraser walks until a pass rewrites nothing).
	return s.redactList(ctx, DeadKey(tenantID), tenantKey(tenantID, "dead:offset-none"), rewrite)
}

func (s *Store) redactList(ctx context.Context, key, offsetKey string, rewrite Rewrite) (int, error) {
	total := 0
	pos := int64(0)
	for {
		res, err := redactRead.Run(ctx, s.rdb, []string{key, offsetKey}, pos, RedactStep).StringSlice()
		if err != nil {
			return total, fmt.Errorf("eventqueue: redact read: %w", err)
		}
		if len(res) <= 1 {
			return total, nil
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
			n, err := redactWrite.Run(ctx, s.rdb, []string{key, offsetKey}, args...).Int()
			if err != nil {
				return total, fmt.Errorf("eventqueue: redact write: %w", err)
			}
			total += n
		}
		pos = first + int64(len(res)-1)
	}
}
