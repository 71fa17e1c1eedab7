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
//   - once the pending mark is cleared (Ack), its score is moved so that it expires AckGrace
//     later: a re-pusher that read the event as pending just before has that long to push it.
//
// So the set holds about (append rate × AckGrace) entries, plus those of crashed appends.
const (
	Retention = 24 * time.Hour
	AckGrace  = 10 * time.Second
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
}

// AppendedKey is the sorted set of ids appended to tenantID's queue, in the queue's slot.
func AppendedKey(tenantID uint64) string {
	return fmt.Sprintf("eventqueue:{tenant:%d}:appended", tenantID)
}

// appendOnce: KEYS list, appended set; ARGV now (ms), retention (ms), then id, JSON pairs.
// Appends, in order and in one RPUSH, the events whose id is not in the set, records their
// ids, and drops entries older than the retention. Returns how many it appended.
var appendOnce = redis.NewScript(`
local now, retention = tonumber(ARGV[1]), tonumber(ARGV[2])
local fresh = {}
for i = 3, #ARGV, 2 do
  if redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i]) == 1 then
    fresh[#fresh + 1] = ARGV[i + 1]
  end
end
if #fresh > 0 then
  redis.call('RPUSH', KEYS[1], unpack(fresh))
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - retention)
redis.call('PEXPIRE', KEYS[2], retention)
return #fresh
`)

// ackAppended: KEYS appended set; ARGV expiry score, then ids. Existing entries only.
var ackAppended = redis.NewScript(`
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', 'LT', ARGV[1], ARGV[i])
end
return 0
`)

// maxScriptEvents bounds the events of one script call (Lua's unpack has a stack limit).
const maxScriptEvents = 1000

// Outcome is what AppendOnce did with one batch.
type Outcome struct {
	Appended int   // events appended; the others were in the queue already
	Err      error // nil when every event of the batch is known to be in the queue
}

// AppendOnce appends each batch to its tenant's queue in order, skipping every event whose id
// was appended before (see Retention), so appending the same events again is a no-op. Each
// batch is atomic; all go in one pipeline round trip. out[i] is batch i's outcome: one
// batch's failure does not fail the others. now is the caller's clock, which ages the
// deduplication entries.
func (s *Store) AppendOnce(ctx context.Context, now time.Time, batches []Batch) (out []Outcome) {
	type call struct {
		batch int
		keys  []string
		args  []any
	}
	var calls []call
	for i, b := range batches {
		for start := 0; start < len(b.Events); start += maxScriptEvents {
			part := b.Events[start:min(start+maxScriptEvents, len(b.Events))]
			args := make([]any, 0, 2+2*len(part))
			args = append(args, now.UnixMilli(), Retention.Milliseconds())
			for _, e := range part {
				args = append(args, e.ID, e.JSON)
			}
			calls = append(calls, call{batch: i, keys: []string{Key(b.TenantID), AppendedKey(b.TenantID)}, args: args})
		}
	}
	out = make([]Outcome, len(batches))
	cmds := make([]*redis.Cmd, len(calls))
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { // each command carries its own error
		for i, c := range calls {
			cmds[i] = appendOnce.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	for i, c := range calls {
		cmd := cmds[i]
		if isNoScript(cmd.Err()) { // Redis restarted and forgot the script: send its source
			cmd = appendOnce.Eval(ctx, s.rdb, c.keys, c.args...)
		}
		n, err := cmd.Int()
		if err != nil {
			if out[c.batch].Err == nil {
				out[c.batch].Err = fmt.Errorf("eventqueue: append: %w", err)
			}
			continue
		}
		out[c.batch].Appended += n
	}
	return out
}

// Ack records that the database no longer calls these appended events of tenantID pending:
// their deduplication entries expire AckGrace after now instead of after Retention.
func (s *Store) Ack(ctx context.Context, now time.Time, tenantID uint64, ids []string) error {
	expireAt := now.Add(AckGrace - Retention).UnixMilli()
	keys := []string{AppendedKey(tenantID)}
	for start := 0; start < len(ids); start += maxScriptEvents {
		part := ids[start:min(start+maxScriptEvents, len(ids))]
		args := make([]any, 0, 1+len(part))
		args = append(args, expireAt)
		for _, id := range part {
			args = append(args, id)
		}
		if err := ackAppended.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("eventqueue: ack: %w", err)
		}
	}
	return nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
