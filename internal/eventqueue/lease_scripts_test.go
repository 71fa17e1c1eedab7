package eventqueue

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/testenv"
)

var oldLeaseScript = redis.NewScript(luaPrelude + `
local limit, vis, maxd, maxleased = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('SET', KEYS[8], ARGV[5], 'NX')
local epoch = redis.call('GET', KEYS[8])
local front = tonumber(redis.call('GET', KEYS[2]) or '0')
local length = redis.call('LLEN', KEYS[1])
local expires = now + vis
local live = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
local room = math.min(limit, maxleased - live)
local out = {}
local dead = false
while room > 0 do
  local due = lowestDue(KEYS[4], room)
  if #due == 0 then break end
  for _, m in ipairs(due) do
    local o = tonumber(m)
    local st = redis.call('HGET', KEYS[3], m)
    local d = tonumber(string.match(st or '', '^(%d+):') or '0')
    if (not st) or o < front or o >= front + length then
      redis.call('ZREM', KEYS[4], m)
      redis.call('HDEL', KEYS[3], m)
    elseif d >= maxd then
      local ev = redis.call('LINDEX', KEYS[1], o - front)
      redis.call('RPUSH', KEYS[9], '{"offset":' .. m .. ',"deliveries":' .. fmt(d) .. ',"event":' .. ev .. '}')
      redis.call('ZREM', KEYS[4], m)
      redis.call('HDEL', KEYS[3], m)
      redis.call('ZADD', KEYS[5], o, m)
      redis.call('ZADD', KEYS[6], now, m)
      dead = true
    else
      d = d + 1
      redis.call('HSET', KEYS[3], m, fmt(d) .. ':' .. ARGV[6])
      redis.call('ZADD', KEYS[4], expires, m)
      out[#out + 1] = o
      out[#out + 1] = d
      out[#out + 1] = redis.call('LINDEX', KEYS[1], o - front)
      room = room - 1
    end
  end
end
local nxt = math.max(tonumber(redis.call('GET', KEYS[7]) or '0'), front)
if room > 0 and nxt < front + length then
  local evs = redis.call('LRANGE', KEYS[1], nxt - front, nxt - front + room - 1)
  local state, expiry = {}, {}
  for i, ev in ipairs(evs) do
    local m = fmt(nxt + i - 1)
    state[#state + 1] = m
    state[#state + 1] = '1:' .. ARGV[6]
    expiry[#expiry + 1] = expires
    expiry[#expiry + 1] = m
    out[#out + 1] = nxt + i - 1
    out[#out + 1] = 1
    out[#out + 1] = ev
  end
  if #evs > 0 then
    redis.call('HSET', KEYS[3], unpack(state))
    redis.call('ZADD', KEYS[4], unpack(expiry))
    nxt = nxt + #evs
  end
end
redis.call('SET', KEYS[7], fmt(nxt))
local trimmed = {0, front, false}
if dead then
  trimmed = trimAcked()
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - 86400000)
end
local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
local nextExpiry = -1
if #first > 0 then
  nextExpiry = tonumber(first[2])
end
if #out == 0 and tonumber(ARGV[7]) > 0 then
  redis.call('SET', KEYS[10], '1', 'PX', ARGV[7])
end
local res = {epoch, expires, trimmed[1], trimmed[2], trimmed[3], nextExpiry}
for _, v in ipairs(out) do
  res[#res + 1] = v
end
return res
`)

var oldAckScript = redis.NewScript(luaPrelude + `
local vis = tonumber(ARGV[1])
local epoch = redis.call('GET', KEYS[8])
local front = tonumber(redis.call('GET', KEYS[2]) or '0')
local nxt = math.max(tonumber(redis.call('GET', KEYS[7]) or '0'), front)
local statuses = {}
local retried = false
for i = 2, #ARGV, 4 do
  local kind, e, m, nonce = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local o = tonumber(m)
  local s
  if e ~= epoch or o == nil or o >= nxt then
    s = 'unknown'
  elseif redis.call('ZSCORE', KEYS[6], m) then
    s = 'trimmed'
  elseif o < front or redis.call('ZSCORE', KEYS[5], m) then
    s = 'already_acked'
  else
    local st = redis.call('HGET', KEYS[3], m)
    if not st then
      s = 'unknown'
    elseif kind == 'a' then
      redis.call('ZADD', KEYS[5], o, m)
      redis.call('HDEL', KEYS[3], m)
      redis.call('ZREM', KEYS[4], m)
      s = 'acked'
    else
      local cur = string.match(st, '^%d+:(.*)$')
      local exp = tonumber(redis.call('ZSCORE', KEYS[4], m) or '0')
      if cur ~= nonce or exp <= now then
        s = 'expired'
      elseif kind == 'r' then
        redis.call('ZADD', KEYS[4], 0, m)
        retried = true
        s = 'retried'
      else
        redis.call('ZADD', KEYS[4], now + vis, m)
        s = 'extended'
      end
    end
  end
  statuses[#statuses + 1] = s
end
local trimmed = trimAcked()
if retried and redis.call('EXISTS', KEYS[10]) == 1 then
  redis.call('SPUBLISH', KEYS[11], '1')
end
local res = {trimmed[1], trimmed[2], trimmed[3]}
for _, s in ipairs(statuses) do
  res[#res + 1] = s
end
return res
`)

// sortTriples sorts v's (offset, deliveries, event) triples by offset, then deliveries (with
// a visibility of 0 an event can be leased twice by one call).
func sortTriples(v []any) {
	triples := make([][3]any, len(v)/3)
	for i := range triples {
		triples[i] = [3]any{v[3*i], v[3*i+1], v[3*i+2]}
	}
	sort.SliceStable(triples, func(i, j int) bool {
		oi, oj := triples[i][0].(int64), triples[j][0].(int64)
		return oi < oj || (oi == oj && triples[i][1].(int64) < triples[j][1].(int64))
	})
	for i, tr := range triples {
		v[3*i], v[3*i+1], v[3*i+2] = tr[0], tr[1], tr[2]
	}
}

// The batched lease and ack scripts answer and leave the state exactly as the per-event
// scripts they replaced, over random sequences of leases, acks, retries, extends, batch acks
// (the old scripts get an ack of each of the batch's events), trims and dead letters: tenant 1 runs the old scripts, tenant 2 the new ones, on the same calls. make
// test runs 12 sequences; make chaos (testenv.Long) runs 200.
func TestLeaseScriptsMatchPerEventScripts(t *testing.T) {
	seeds := int64(12)
	if testenv.Long() {
		seeds = 200
	}
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	t.Cleanup(s.Close)
	ctx := context.Background()
	batchAcks, againAcks := 0, 0 // batch acks that acknowledged something; of them, with events leased again
	for seed := int64(1); seed <= seeds; seed++ {
		rdb.FlushAll(ctx)
		r := rand.New(rand.NewSource(seed))
		const a, b = 1, 2
		next := 0
		var ids []string // lease ids handed out so far (tenant a's; b's are the same but the epoch)
		var calls []call // the same, per lease call
		epochOf := map[uint64]string{}
		for step := 0; step < 60; step++ {
			switch op := r.Intn(10); {
			case op < 2: // append
				n := 1 + r.Intn(30)
				evs := make([][]byte, n)
				for i := range evs {
					evs[i] = []byte(fmt.Sprintf(`{"id":"e%d","n":%d}`, next, next))
					next++
				}
				for _, ten := range []uint64{a, b} {
					if err := s.Append(ctx, ten, evs...); err != nil {
						t.Fatal(err)
					}
				}
			case op < 5: // lease
				limit, maxd, maxleased := 1+r.Intn(40), int64(1+r.Intn(3)), MaxLeased
				if r.Intn(3) == 0 {
					maxleased = 1 + r.Intn(60) // the cap counts leases of both kinds
				}
				vis := int64(3600000)
				if r.Intn(3) == 0 {
					vis = 0 // expired at once: reclaimable by the next lease
				}
				nonce := fmt.Sprintf("n%d", step)
				var res [2][]any
				for i, sc := range []*redis.Script{oldLeaseScript, leaseScript} {
					ten := []uint64{a, b}[i]
					v, err := sc.Run(ctx, rdb, leaseKeys(ten), limit, vis, maxd, maxleased, fmt.Sprintf("ep%d", ten), nonce, 0,
						DefaultMaxDeadLetters, DefaultDeadLetterRetention.Milliseconds(), GoneRetention.Milliseconds()).Slice()
					if err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					if sc == leaseScript { // the counters the old script did not report, and the new events as triples
						first, n, front := v[10].(int64), v[11].(int64), v[3].(int64)
						var fresh []string
						if n > 0 {
							fresh, err = rdb.LRange(ctx, Key(ten), first-front, first-front+n-1).Result()
						}
						if err != nil || int64(len(fresh)) != n {
							t.Fatalf("seed %d step %d: %d of %d new events: %v", seed, step, len(fresh), n, err)
						}
						v = append(v[:6:6], v[leaseHead:]...)
						for i, ev := range fresh {
							v = append(v, first+int64(i), int64(1), ev)
						}
					}
					if sc == oldLeaseScript { // the new script answers its events in offset order
						sortTriples(v[6:])
					}
					epochOf[ten] = v[0].(string)
					v[0], v[1] = nil, nil // epoch and expiry
					if n, ok := v[5].(int64); ok && n > 0 {
						v[5] = "some"
					}
					res[i] = v
				}
				if !reflect.DeepEqual(res[0], res[1]) {
					t.Fatalf("seed %d step %d lease:\nold %v\nnew %v", seed, step, res[0], res[1])
				}
				c := call{nonce: nonce}
				for i := 6; i < len(res[0]); i += 3 {
					o := res[0][i].(int64)
					c.ids = append(c.ids, strconv.FormatInt(o, 10)+"-"+nonce)
					if res[0][i+1].(int64) > 1 {
						c.again = true
					} else if c.end == 0 {
						c.first, c.end = o, o+1
					} else {
						c.end = o + 1
					}
				}
				ids = append(ids, c.ids...)
				calls = append(calls, c)
			case op < 9: // settle
				n := 1 + r.Intn(25)
				batchesOnly := r.Intn(3) == 0 // the ack script's path for whole batches
				if batchesOnly {
					n = 0
				}
				var args [2][]any
				args[0], args[1] = []any{int64(3600000)}, []any{int64(3600000)}
				if r.Intn(4) == 0 {
					args[0][0], args[1][0] = int64(0), int64(0)
				}
				whole := []string(nil) // every lease of one call extended, as the SDK does
				if len(calls) > 0 && r.Intn(4) == 0 && !batchesOnly {
					whole = calls[r.Intn(len(calls))].ids
					n = len(whole)
				}
				for j := 0; j < n; j++ {
					kind := string("aaree"[r.Intn(5)])
					id := "0-x"
					if whole != nil {
						kind, id = "e", whole[j]
					} else if len(ids) > 0 && r.Intn(8) > 0 {
						id = ids[r.Intn(len(ids))]
					} else if r.Intn(2) == 0 {
						id = strconv.Itoa(r.Intn(next+5)) + "-n" + strconv.Itoa(r.Intn(60))
					}
					var off, nonce string
					for k := 0; k < len(id); k++ {
						if id[k] == '-' {
							off, nonce = id[:k], id[k+1:]
							break
						}
					}
					other := r.Intn(20) == 0
					for i, ten := range []uint64{a, b} {
						ep := epochOf[ten]
						if other {
							ep = "other"
						}
						args[i] = append(args[i], kind, ep, off, nonce)
					}
				}
				// Batch acks: the old scripts get each event of the batch as an ack, and the
				// new one's count must be the acks among their statuses.
				ids := (len(args[0]) - 1) / 4
				args[1] = append([]any{args[1][0], ids}, args[1][1:]...)
				var expand []int // per batch: how many acks the old script got for it; -1 unknown
				var again []bool
				j := r.Intn(4) - 1
				if batchesOnly {
					j = 1 + r.Intn(3)
				}
				for ; j > 0 && len(calls) > 0; j-- {
					c := calls[r.Intn(len(calls))]
					if r.Intn(10) == 0 {
						args[1] = append(args[1], "other", strconv.FormatInt(c.first, 10), strconv.FormatInt(c.end, 10), c.nonce, "0")
						expand, again = append(expand, -1), append(again, false)
						continue
					}
					flag := "0"
					if c.again {
						flag = "1"
					}
					args[1] = append(args[1], epochOf[b], strconv.FormatInt(c.first, 10), strconv.FormatInt(c.end, 10), c.nonce, flag)
					for _, id := range c.ids {
						off, nonce, _ := strings.Cut(id, "-")
						args[0] = append(args[0], "a", epochOf[a], off, nonce)
					}
					expand, again = append(expand, len(c.ids)), append(again, c.again)
				}
				var res [2][]any
				for i, sc := range []*redis.Script{oldAckScript, ackScript} {
					v, err := sc.Run(ctx, rdb, leaseKeys([]uint64{a, b}[i]), args[i]...).Slice()
					if err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					res[i] = v
				}
				old := res[0][: 3+ids : 3+ids]
				rest := res[0][3+ids:]
				for _, k := range expand {
					if k < 0 {
						old = append(old, int64(-1))
						continue
					}
					acked := int64(0)
					for _, st := range rest[:k] {
						if st == StatusAcked {
							acked++
						}
					}
					old, rest = append(old, acked), rest[k:]
				}
				res[0] = old
				for k, x := range old[3+ids:] {
					if x.(int64) > 0 {
						batchAcks++
						if again[k] {
							againAcks++
						}
					}
				}
				if !reflect.DeepEqual(res[0], res[1]) {
					t.Fatalf("seed %d step %d settle %v:\nold %v\nnew %v", seed, step, args[0], res[0], res[1])
				}
			default: // trim
				n := int64(r.Intn(10))
				for _, ten := range []uint64{a, b} {
					off, _ := s.Offset(ctx, ten)
					if _, err := s.Trim(ctx, ten, n, off); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(time.Millisecond)
			if x, y := leaseStateOf(t, rdb, a), leaseStateOf(t, rdb, b); !reflect.DeepEqual(x, y) {
				t.Fatalf("seed %d step %d: state\nold %v\nnew %v", seed, step, x, y)
			}
			la, _, err := s.LeaseCounts(ctx, a, DeadPolicy{})
			testenv.Must(t, err)
			lb, _, err := s.LeaseCounts(ctx, b, DeadPolicy{})
			testenv.Must(t, err)
			if la != lb {
				t.Fatalf("seed %d step %d: %d live leases with the old scripts, %d with the new", seed, step, la, lb)
			}
		}
	}
	if batchAcks == 0 || againAcks == 0 {
		t.Fatalf("%d batch acks acknowledged something, %d of them with events leased again: the sequences no longer test them", batchAcks, againAcks)
	}
}

// call is one lease call of TestLeaseScriptsMatchPerEventScripts: its lease ids
// ("offset-nonce"), and its batch: the run of events leased for the first time, and whether
// it leased others again.
type call struct {
	ids        []string
	nonce      string
	first, end int64
	again      bool
}

// leaseStateOf is tenant's queue and lease state, expiries as "past"/"future"/"0", with each
// event of a lease range shown as the per-event lease it stands for (lease_ranges.go). It
// fails the test if a range's counts disagree with the events it holds.
func leaseStateOf(t *testing.T, rdb redis.UniversalClient, tenant uint64) []any {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	state := rdb.HGetAll(ctx, LeaseStateKey(tenant)).Val()
	expiry := rdb.ZRangeWithScores(ctx, LeaseExpiryKey(tenant), 0, -1).Val()
	acked := map[string]bool{}
	for _, m := range rdb.ZRange(ctx, AckedKey(tenant), 0, -1).Val() {
		acked[m] = true
	}
	front, _ := strconv.ParseInt(rdb.Get(ctx, OffsetKey(tenant)).Val(), 10, 64)
	var held int64
	for start, info := range rdb.HGetAll(ctx, LeaseRangesKey(tenant)).Val() {
		var stop, ackedIn int64
		var nonce string
		if _, err := fmt.Sscanf(strings.Replace(info, ":", " ", 2), "%d %d %s", &stop, &ackedIn, &nonce); err != nil {
			t.Fatalf("range %s: %q: %v", start, info, err)
		}
		first, _ := strconv.ParseInt(start, 10, 64)
		exp, err := rdb.ZScore(ctx, LeaseRangeExpiryKey(tenant), start).Result()
		if err != nil || rdb.ZScore(ctx, LeaseRangeStartKey(tenant), start).Val() != float64(first) {
			t.Fatalf("range %s is not in both sorted sets: %v", start, err)
		}
		var done int64
		for o := first; o < stop; o++ {
			m := strconv.FormatInt(o, 10)
			if o < front || acked[m] {
				done++
				continue
			}
			state[m] = "1:" + nonce
			expiry = append(expiry, redis.Z{Score: exp, Member: m})
		}
		if done != ackedIn {
			t.Fatalf("range %s–%d counts %d acknowledged, holds %d", start, stop, ackedIn, done)
		}
		held += stop - first - ackedIn
	}
	if got, _ := rdb.Get(ctx, LeaseRangeHeldKey(tenant)).Int64(); got != held {
		t.Fatalf("ranges hold %d events, the counter says %d", held, got)
	}
	for _, k := range []string{LeaseRangeStartKey(tenant), LeaseRangeExpiryKey(tenant)} {
		if n := rdb.ZCard(ctx, k).Val(); n != rdb.HLen(ctx, LeaseRangesKey(tenant)).Val() {
			t.Fatalf("%s has %d members for %d ranges", k, n, rdb.HLen(ctx, LeaseRangesKey(tenant)).Val())
		}
	}
	sort.Slice(expiry, func(i, j int) bool {
		if expiry[i].Score != expiry[j].Score {
			return expiry[i].Score < expiry[j].Score
		}
		return expiry[i].Member.(string) < expiry[j].Member.(string)
	})
	norm := func(zs []redis.Z) []string {
		var out []string
		for _, z := range zs {
			v := "future"
			switch {
			case z.Score == 0:
				v = "0"
			case int64(z.Score) <= now:
				v = "past"
			}
			out = append(out, fmt.Sprint(z.Member)+":"+v)
		}
		return out
	}
	return []any{
		rdb.LRange(ctx, Key(tenant), 0, -1).Val(), rdb.Get(ctx, OffsetKey(tenant)).Val(),
		state, norm(expiry),
		rdb.ZRange(ctx, AckedKey(tenant), 0, -1).Val(), rdb.ZRange(ctx, GoneKey(tenant), 0, -1).Val(),
		rdb.Get(ctx, LeaseNextKey(tenant)).Val(), rdb.LRange(ctx, DeadKey(tenant), 0, -1).Val(),
	}
}

// queueOf starts a Redis whose tenant 1 has a queue of n events.
func queueOf(t *testing.T, n int) (redis.UniversalClient, *Store) {
	t.Helper()
	rdb := testenv.StartRedis(t).Client()
	s := New(rdb)
	t.Cleanup(s.Close)
	evs := make([][]byte, n)
	for i := range evs {
		evs[i] = []byte(fmt.Sprintf(`{"id":"e%d"}`, i))
	}
	testenv.Must(t, s.Append(context.Background(), 1, evs...))
	return rdb, s
}

// A lease of never-leased events writes one range, not an entry per event, and acknowledging
// them in any order, partly behind the front, counts them out of it and forgets it once all
// are: the per-event structures stay empty throughout (lease_ranges.go).
func TestALeaseOfNewEventsIsOneRange(t *testing.T) {
	rdb, s := queueOf(t, 2500)
	ctx := context.Background()
	perEvent := func() int64 {
		return rdb.HLen(ctx, LeaseStateKey(1)).Val() + rdb.ZCard(ctx, LeaseExpiryKey(1)).Val()
	}
	res := mustLease(t, s, 1, 2500, time.Hour, 10) // above maxRange: three ranges
	if len(res.Events) != 2500 || res.Live != 2500 {
		t.Fatalf("leased %d, %d live; want 2500", len(res.Events), res.Live)
	}
	if n, pe := rdb.HLen(ctx, LeaseRangesKey(1)).Val(), perEvent(); n != 3 || pe != 0 {
		t.Fatalf("%d ranges and %d per-event entries, want 3 ranges of at most %d and none", n, pe, maxRange)
	}
	ids := make([]string, len(res.Events))
	for i, e := range res.Events {
		ids[i] = e.LeaseID
	}
	// The back half first, in reverse, then the front half: the front stays until the end.
	back := slices.Clone(ids[1250:])
	slices.Reverse(back)
	st, tr := mustSettle(t, s, 1, KindAck, back...)
	if tr.Count != 0 || st[0] != StatusAcked {
		t.Fatalf("acknowledging behind the front trimmed %d (%v)", tr.Count, st[:1])
	}
	if leased, _, err := s.LeaseCounts(ctx, 1, DeadPolicy{}); err != nil || leased != 1250 {
		t.Fatalf("%d live leases, %v; want the 1250 not acknowledged", leased, err)
	}
	st, tr = mustSettle(t, s, 1, KindAck, ids[:1250]...)
	if tr.Count != 2500 || st[1249] != StatusAcked {
		t.Fatalf("acknowledging the front trimmed %d, want 2500", tr.Count)
	}
	st, _ = mustSettle(t, s, 1, KindAck, ids[0], ids[2499])
	wantStatuses(t, st, StatusAlreadyAcked, StatusAlreadyAcked)
	for _, k := range []string{LeaseRangesKey(1), LeaseRangeStartKey(1), LeaseRangeExpiryKey(1), AckedKey(1), LeaseStateKey(1), LeaseExpiryKey(1)} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s still exists once every event is acknowledged", k)
		}
	}
	if held := rdb.Get(ctx, LeaseRangeHeldKey(1)).Val(); held != "0" {
		t.Errorf("ranges hold %s events, want 0", held)
	}
}

// An extend of every lease of one call (what the SDK sends while a handler runs) moves its
// range's expiry: the range outlives its first expiry unsplit, and an extend that leaves one
// event out splits it into per-event leases, extending those named.
func TestAWholeBatchExtendKeepsItsRange(t *testing.T) {
	rdb, s := queueOf(t, 200)
	ctx := context.Background()
	perEvent := func() int64 { return rdb.HLen(ctx, LeaseStateKey(1)).Val() }
	ids := func(res LeaseResult) []string {
		out := make([]string, len(res.Events))
		for i, e := range res.Events {
			out[i] = e.LeaseID
		}
		return out
	}
	first := ids(mustLease(t, s, 1, 100, 300*time.Millisecond, 10))
	second := ids(mustLease(t, s, 1, 100, 300*time.Millisecond, 10))
	st, _ := mustSettle(t, s, 1, KindExtend, first...) // 30 s
	for _, x := range st {
		if x != StatusExtended {
			t.Fatalf("a whole batch's extend answered %v", st)
		}
	}
	st, _ = mustSettle(t, s, 1, KindExtend, second[1:]...)
	if st[0] != StatusExtended || len(st) != 99 {
		t.Fatalf("a partial extend answered %v", st)
	}
	if n, pe := rdb.HLen(ctx, LeaseRangesKey(1)).Val(), perEvent(); n != 1 || pe != 100 {
		t.Fatalf("%d ranges and %d per-event leases; want the whole batch's range kept and the other split into 100", n, pe)
	}
	testenv.Eventually(t, 5*time.Second, "the lease not extended runs out", func() bool {
		leased, _, err := s.LeaseCounts(ctx, 1, DeadPolicy{})
		return err == nil && leased == 199
	})
	res := mustLease(t, s, 1, 100, time.Minute, 10)
	if got := offsetsOf(res); !slices.Equal(got, []int64{100}) || res.Events[0].Deliveries != 2 {
		t.Fatalf("after the first expiry a lease got %v; want only offset 100, the one not extended, delivered again", got)
	}
	if leased, _, err := s.LeaseCounts(ctx, 1, DeadPolicy{}); err != nil || leased != 200 {
		t.Fatalf("%d live leases, %v; want 200", leased, err)
	}
}
