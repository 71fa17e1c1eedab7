package eventqueue

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The lease and acknowledgement scripts, and the Lua they share (see lease.go).

// luaPrelude is shared by the lease and ack scripts: the server's time, and trimming the
// acknowledged front as Trim would. KEYS as leaseKeys.
const luaPrelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fmt(n)
  return string.format('%d', n)
end
-- callEach runs cmd on key with args in slices that unpack can take (it refuses more than
-- about 8,000 values; an ack script may name 10,000 events), and concatenates the replies
-- that are arrays. Slices are of an even length, so pairs stay together.
local function callEach(cmd, key, args)
  local out = {}
  for i = 1, #args, 4000 do
    local r = redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
    if type(r) == 'table' then
      for _, v in ipairs(r) do out[#out + 1] = v end
    end
  end
  return out
end
local function trimAcked(pre)
  -- pre: how many events at front, front + 1, … are acknowledged without being in KEYS[5]
  -- (they go at once)
  pre = pre or 0
  local front = tonumber(redis.call('GET', KEYS[2]) or '0')
  local n = pre
  while true do
    local run = redis.call('ZRANGEBYSCORE', KEYS[5], front + n, '+inf', 'LIMIT', 0, 1000)
    local c = 0
    for _, m in ipairs(run) do
      if tonumber(m) ~= front + n then break end
      n, c = n + 1, c + 1
    end
    if c < 1000 then break end
  end
  n = math.min(n, redis.call('LLEN', KEYS[1]))
  if n < pre then
    local z = {}
    for k = math.max(n, 0) + 1, pre do
      z[#z + 1] = front + k - 1
      z[#z + 1] = fmt(front + k - 1)
    end
    callEach('ZADD', KEYS[5], z)
  end
  if n <= 0 then
    return {0, front, false}
  end
  local last = redis.call('LINDEX', KEYS[1], n - 1)
  redis.call('LTRIM', KEYS[1], n, -1)
  front = redis.call('INCRBY', KEYS[2], n)
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. front)
  return {n, front, string.match(last, '^{"id":"([^"]*)"') or false}
end
-- lowestDue returns at most room members of the sorted set key of leases due by now, those
-- due first and, among those due at the same moment, the lowest offsets. Redis orders equal
-- scores as strings ("10" before "9"), and one lease call gives all its events one expiry, so
-- the members at the page's last score are all read and the lowest taken.
local function lowestDue(key, room)
  local page = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, room)
  if #page == 0 then return {} end
  local due, last, offsets = {}, page[#page], {}
  for i = 1, #page, 2 do
    if page[i + 1] ~= last then
      due[#due + 1] = page[i]
    else
      offsets[#offsets + 1] = tonumber(page[i])
    end
  end
  if #page == 2 * room then -- more may be due at the last score, past the page
    offsets = {}
    for i, m in ipairs(redis.call('ZRANGEBYSCORE', key, last, last)) do offsets[i] = tonumber(m) end
  end
  table.sort(offsets)
  for i = 1, math.min(room - #due, #offsets) do due[#due + 1] = fmt(offsets[i]) end
  return due
end

-- zaddAll adds members to the sorted set key, all with score, greatest member first: a small
-- sorted set then inserts each at its head instead of walking it.
local function zaddAll(key, score, members)
  table.sort(members, function(a, b) return a > b end)
  local z = {}
  for i, m in ipairs(members) do
    z[2 * i - 1] = score
    z[2 * i] = m
  end
  redis.call('ZADD', key, unpack(z))
end
`

// lease: KEYS as leaseKeys; ARGV limit, visibility ms, max deliveries, max leased, epoch to
// set when the tenant has none, nonce, wait ms, most dead letters, dead letter retention ms,
// GoneRetention ms, max bytes (optional).
// Leases no more events than fit in max bytes at the size of the queue's largest (KEYS[19],
// SizeKey; when known), and at least one.
// Takes reclaimable events first (expired or retried leases; those leased max deliveries
// times go to the dead letters instead), then never-leased ones from the cursor. Returns
// {epoch, expires ms, trimmed, front, last trimmed id, next expiry ms or -1, dead letters
// added, dead letters dropped, redeliveries, live leases, the offset of the first event leased
// for the first time, how many were (one run of offsets, each delivered once: the caller reads
// them), then offset, deliveries, event per event leased again}.
var leaseScript = redis.NewScript(luaPrelude + luaDead + luaRanges + "local maxBatchRecords = " + strconv.Itoa(maxBatchRecords) + "\n" + `
local limit, vis, maxd, maxleased = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local budget, size = tonumber(ARGV[11]), tonumber(redis.call('GET', KEYS[19]) or '0')
if budget and size > 0 then
  limit = math.max(1, math.min(limit, math.floor((budget + 1) / (size + 1))))
end
redis.call('SET', KEYS[8], ARGV[5], 'NX')
local epoch = redis.call('GET', KEYS[8])
local front = tonumber(redis.call('GET', KEYS[2]) or '0')
local length = redis.call('LLEN', KEYS[1])
local expires = now + vis
-- Ranges whose lease expired become per-event leases, due: taken below as any expired lease.
while true do
  local due = redis.call('ZRANGEBYSCORE', KEYS[15], '-inf', now, 'LIMIT', 0, 1000)
  if #due == 0 then break end
  local info = redis.call('HMGET', KEYS[13], unpack(due))
  for i, s in ipairs(due) do
    if info[i] then
      splitRange(KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[3], KEYS[4], KEYS[5], parseRange(info[i], s), front)
    else
      redis.call('ZREM', KEYS[15], s)
      redis.call('ZREM', KEYS[14], s)
    end
  end
end
local rangeHeld = tonumber(redis.call('GET', KEYS[16]) or '0') -- every range is live now
local live = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf') + rangeHeld
local fresh = 0 -- events of the range made below, if it is live
local room = math.min(limit, maxleased - live)
local out = {epoch, expires, 0, front, false, -1, 0, 0, 0, 0, 0, 0}
local dead, added, redelivered, leased = false, 0, 0, 0
local again = {} -- the offsets leased again: the batch's record (its new events are in its id)
local again3 = {} -- {offset, deliveries, event} per event leased again, put in out in offset order
while room > 0 do
  local due = lowestDue(KEYS[4], room)
  if #due == 0 then break end
  local sts = redis.call('HMGET', KEYS[3], unpack(due))
  local drop, take = {}, {}
  local lo, hi = math.huge, -1
  for j, m in ipairs(due) do
    local o = tonumber(m)
    local st = sts[j]
    if (not st) or o < front or o >= front + length then
      drop[#drop + 1] = m
    else
      local d = tonumber(string.match(st, '^(%d+):') or '0')
      take[#take + 1] = {o, m, d}
      lo, hi = math.min(lo, o - front), math.max(hi, o - front)
    end
  end
  local evs
  if #take > 0 and hi - lo + 1 <= 2 * #take + 64 then
    evs = redis.call('LRANGE', KEYS[1], lo, hi)
  end
  local letters, acked, gone, state, expiry = {}, {}, {}, {}, {}
  for _, tk in ipairs(take) do
    local o, m, d = tk[1], tk[2], tk[3]
    local ev
    if evs then
      ev = evs[o - front - lo + 1]
    else
      ev = redis.call('LINDEX', KEYS[1], o - front)
    end
    if d >= maxd then
      letters[#letters + 1] = '{"offset":' .. m .. ',"deliveries":' .. fmt(d) .. ',"event":' .. ev .. '}'
      drop[#drop + 1] = m
      acked[#acked + 1] = o
      acked[#acked + 1] = m
      gone[#gone + 1] = now
      gone[#gone + 1] = m
    else
      d = d + 1
      redelivered = redelivered + 1
      again[#again + 1] = m
      state[#state + 1] = m
      state[#state + 1] = fmt(d) .. ':' .. ARGV[6]
      expiry[#expiry + 1] = m
      again3[#again3 + 1] = {o, d, ev}
      room = room - 1
    end
  end
  if #drop > 0 then
    redis.call('ZREM', KEYS[4], unpack(drop))
    redis.call('HDEL', KEYS[3], unpack(drop))
  end
  if #letters > 0 then
    redis.call('RPUSH', KEYS[9], unpack(letters))
    local at = {}
    for i = 1, #letters do at[i] = now end
    redis.call('RPUSH', KEYS[12], unpack(at))
    added = added + #letters
    redis.call('ZADD', KEYS[5], unpack(acked))
    redis.call('ZADD', KEYS[6], unpack(gone))
    dead = true
  end
  if #state > 0 then
    redis.call('HSET', KEYS[3], unpack(state))
    zaddAll(KEYS[4], expires, expiry)
  end
end
table.sort(again3, function(x, y) return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2]) end)
for _, e in ipairs(again3) do
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = e[1], e[2], e[3]
end
local nxt = math.max(tonumber(redis.call('GET', KEYS[7]) or '0'), front)
if room > 0 and nxt < front + length then
  -- The caller reads these events itself, after the script: through Lua they would be
  -- copied twice more (lease.go, Lease).
  local n = math.min(room, front + length - nxt)
  out[11], out[12] = nxt, n
  -- never leased: one range (of at most maxRange events) instead of a lease each
  for s = nxt, nxt + n - 1, maxRange do
    local key = fmt(s)
    redis.call('HSET', KEYS[13], key, fmt(math.min(s + maxRange, nxt + n)) .. ':0:' .. ARGV[6])
    redis.call('ZADD', KEYS[14], s, key)
    redis.call('ZADD', KEYS[15], expires, key)
  end
  if n > 0 then
    redis.call('INCRBY', KEYS[16], n)
    nxt = nxt + n
    if expires > now then
      fresh = n
    end
  end
end
redis.call('SET', KEYS[7], fmt(nxt))
if #again > 0 then
  redis.call('HSET', KEYS[17], ARGV[6], table.concat(again, ','))
  redis.call('ZADD', KEYS[18], now, ARGV[6])
  local old = redis.call('ZRANGEBYSCORE', KEYS[18], '-inf', now - tonumber(ARGV[10]), 'LIMIT', 0, 100)
  if #old > 0 then
    redis.call('HDEL', KEYS[17], unpack(old))
    redis.call('ZREM', KEYS[18], unpack(old))
  end
  -- At most maxBatchRecords records, the oldest forgotten first: each call adds one.
  local over = redis.call('ZCARD', KEYS[18]) - maxBatchRecords
  if over > 0 then
    old = redis.call('ZRANGE', KEYS[18], 0, math.min(over, 100) - 1)
    redis.call('HDEL', KEYS[17], unpack(old))
    redis.call('ZREM', KEYS[18], unpack(old))
  end
end
local trimmed = {0, front, false}
local dropped = 0
if dead then
  trimmed = trimAcked()
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - tonumber(ARGV[10]))
  dropped = pruneDead(KEYS[9], KEYS[12], tonumber(ARGV[8]), tonumber(ARGV[9]))
end
local nextExpiry = -1
for _, k in ipairs({KEYS[4], KEYS[15]}) do
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if #first > 0 and (nextExpiry < 0 or tonumber(first[2]) < nextExpiry) then
    nextExpiry = tonumber(first[2])
  end
end
if #out == 12 and out[12] == 0 and tonumber(ARGV[7]) > 0 then
  redis.call('SET', KEYS[10], '1', 'PX', ARGV[7])
end
out[3], out[4], out[5], out[6] = trimmed[1], trimmed[2], trimmed[3], nextExpiry
out[7], out[8], out[9] = added, dropped, redelivered
out[10] = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf') + rangeHeld + fresh
return out
`)

// ack: KEYS as leaseKeys; ARGV visibility ms, the number of lease ids, then kind ("a", "r",
// "e"), epoch, offset, nonce per lease id, then epoch, first offset, end, nonce and "1" when it
// leased events again (else "0") per batch. A batch is acknowledged as its events' lease ids
// would be, after the lease ids. Returns {trimmed, front, last trimmed id, then a status per
// lease id, then per batch the events it acknowledged, or -1 when it is unknown}.
var ackScript = redis.NewScript(luaPrelude + luaRanges + `
local vis = tonumber(ARGV[1])
local epoch = redis.call('GET', KEYS[8])
local front = tonumber(redis.call('GET', KEYS[2]) or '0')
local nxt = math.max(tonumber(redis.call('GET', KEYS[7]) or '0'), front)
local ids = tonumber(ARGV[2])
local items = {} -- kind, epoch, offset, nonce, and the batch an ack of a batch's event counts in
for i = 3, 2 + 4 * ids, 4 do
  items[#items + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]}
end
local batches = {}
local batchDone = {} -- start → end of each batch acknowledged whole, below
for i = 3 + 4 * ids, #ARGV, 5 do
  local b = #batches + 1
  local start, stop, nonce = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  batches[b] = -1
  if ARGV[i] == epoch and start and stop and start <= stop and stop - start <= maxRange then
    local record = ''
    if ARGV[i + 4] == '1' then
      record = redis.call('HGET', KEYS[17], nonce)
    elseif ids == 0 and start < stop and start >= front then
      -- The common case: a batch of new events only, its range still whole and none of it
      -- acknowledged, so every one of its events is acknowledged now. The range goes at once,
      -- without an item per event. Only without lease ids in the call, whose order would count.
      local key = fmt(start)
      local info = redis.call('HGET', KEYS[13], key)
      if info then
        local r = parseRange(info, key)
        if r.stop == stop and r.nonce == nonce and r.acked == 0 then
          dropRange(KEYS[13], KEYS[14], KEYS[15], KEYS[16], r)
          batchDone[start] = stop
          batches[b] = stop - start
          record = false
        end
      end
    end
    if record then
      batches[b] = 0
      for o = start, stop - 1 do
        items[#items + 1] = {'a', epoch, fmt(o), nonce, b}
      end
      for m in string.gmatch(record, '%d+') do
        items[#items + 1] = {'a', epoch, m, nonce, b}
      end
    end
  end
end
local cand, seen, moves = {}, {}, {}
for _, it in ipairs(items) do
  local e, m = it[2], it[3]
  local o = tonumber(m)
  if e == epoch and o ~= nil and o < nxt then
    if not seen[m] then
      seen[m] = true
      cand[#cand + 1] = m
    end
    if it[1] ~= 'a' then moves[m] = true end
  end
end
-- The ranges that may hold the candidates (see lease_ranges.go); a retry or an extend works on
-- a per-event lease, so the ranges they name are split first.
local ranges = {}
local lo, hi = math.huge, -1
for _, m in ipairs(cand) do
  local o = tonumber(m)
  lo, hi = math.min(lo, o), math.max(hi, o)
end
if #cand > 0 then
  ranges = rangesIn(KEYS[13], KEYS[14], lo - maxRange + 1, hi)
end
local function rangeAt(o)
  local a, b = 1, #ranges
  while a <= b do
    local mid = math.floor((a + b) / 2)
    local r = ranges[mid]
    if o < r.start then
      b = mid - 1
    elseif o >= r.stop then
      a = mid + 1
    else
      if r.split then return nil end
      return r
    end
  end
  return nil
end
-- Extends that name every event a range still holds, with its nonce, before it ran out, and
-- nothing else of it, move the range's expiry instead (the SDK extends whole batches).
local whole = {}
if #ranges > 0 and next(moves) ~= nil then
  local per = {}
  for _, it in ipairs(items) do
    local kind, m, nonce = it[1], it[3], it[4]
    local o = tonumber(m)
    if it[2] == epoch and o ~= nil and o < nxt then
      local r = rangeAt(o)
      if r then
        local p = per[r] or {ok = true, named = {}, n = 0}
        per[r] = p
        if kind ~= 'e' or nonce ~= r.nonce then
          p.ok = false
        elseif not p.named[m] then
          p.named[m], p.n = true, p.n + 1
        end
      end
    end
  end
  for r, p in pairs(per) do
    -- the events named are those it holds: as many, and none acknowledged (those before the
    -- front are too)
    local ok = p.ok and p.n == r.stop - r.start - r.acked
    if ok and r.acked > 0 then
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], r.start, r.stop - 1)) do
        if p.named[m] then ok = false end
      end
      for m in pairs(p.named) do
        if tonumber(m) < front then ok = false end
      end
    end
    if ok then
      r.expiry = tonumber(redis.call('ZSCORE', KEYS[15], r.key) or '0')
      if r.expiry > now then
        whole[r] = true
        redis.call('ZADD', KEYS[15], now + vis, r.key)
      end
    end
  end
end
for _, m in ipairs(cand) do
  if moves[m] then
    local r = rangeAt(tonumber(m))
    if r and not whole[r] then
      splitRange(KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[3], KEYS[4], KEYS[5], r, front)
    end
  end
end
-- An event with a state entry is leased and neither acknowledged nor gone (an ack, a trim and
-- a dead letter each delete it): only the others are looked up as gone or acknowledged, then
-- as an event of a range; only a retry or an extend needs a per-event lease's expiry.
local gone, acked, state, expiry, inRange = {}, {}, {}, {}, {}
if #cand > 0 then
  local st = {}
  if redis.call('EXISTS', KEYS[3]) == 1 then -- none while every lease is a range's
    st = callEach('HMGET', KEYS[3], cand)
  end
  local stateless, settles = {}, {}
  for j, m in ipairs(cand) do
    if st[j] then
      state[m] = st[j]
      if moves[m] then settles[#settles + 1] = m end
    else
      stateless[#stateless + 1] = m
    end
  end
  if #stateless > 0 then
    if redis.call('EXISTS', KEYS[6]) == 1 then
      local g = callEach('ZMSCORE', KEYS[6], stateless)
      for j, m in ipairs(stateless) do
        gone[m] = g[j]
      end
    end
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], lo, hi)) do
      acked[m] = true
    end
    for _, m in ipairs(stateless) do
      local o = tonumber(m)
      if not gone[m] and not acked[m] and o >= front then
        local r = rangeAt(o)
        if r then
          state[m] = '1:' .. r.nonce
          inRange[m] = r
          if whole[r] then
            expiry[m] = r.expiry -- as it was: the extend below answers extended
          end
        end
      end
    end
  end
  if #settles > 0 then
    local ex = callEach('ZMSCORE', KEYS[4], settles)
    for j, m in ipairs(settles) do
      expiry[m] = tonumber(ex[j] or '0')
    end
  end
end
local res = {0, 0, false}
local newAcked, newAckedOffsets, moved, isMoved, ackedAt = {}, {}, {}, {}, {}
local retried = false
local rangeAcks = 0
for _, it in ipairs(items) do
  local kind, e, m, nonce = it[1], it[2], it[3], it[4]
  local o = tonumber(m)
  local s
  if e ~= epoch or o == nil or o >= nxt then
    s = 'unknown'
  elseif gone[m] then
    s = 'trimmed'
  elseif o < front or acked[m] then
    s = 'already_acked'
  else
    local st = state[m]
    if not st then
      s = 'unknown'
    elseif kind == 'a' then
      acked[m] = true
      state[m] = false
      expiry[m] = 0
      local r = inRange[m]
      if r then
        r.acked, r.touched = r.acked + 1, true
        rangeAcks = rangeAcks + 1
      else
        newAcked[#newAcked + 1] = m
      end
      newAckedOffsets[#newAckedOffsets + 1] = o
      newAckedOffsets[#newAckedOffsets + 1] = m
      ackedAt[o] = m
      s = 'acked'
    else
      local cur = string.match(st, '^%d+:(.*)$')
      if cur ~= nonce or expiry[m] <= now then
        s = 'expired'
      else
        if kind == 'r' then
          expiry[m] = 0
          retried = true
          s = 'retried'
        else
          expiry[m] = now + vis
          s = 'extended'
        end
        if not isMoved[m] then
          isMoved[m] = true
          moved[#moved + 1] = m
        end
      end
    end
  end
  if it[5] then
    if s == 'acked' then batches[it[5]] = batches[it[5]] + 1 end
  else
    res[#res + 1] = s
  end
end
for _, b in ipairs(batches) do
  res[#res + 1] = b
end
-- The acknowledged run at the front is trimmed at once, the others wait in KEYS[5]. Whole
-- batches count without a member each unless they wait.
local pre = 0
if #newAckedOffsets > 0 or next(batchDone) ~= nil then
  while true do
    local o = front + pre
    if batchDone[o] then
      pre = batchDone[o] - front
    elseif ackedAt[o] then
      pre = pre + 1
    else
      break
    end
  end
  local z = {}
  for k = 1, #newAckedOffsets, 2 do
    if newAckedOffsets[k] >= front + pre then
      z[#z + 1] = newAckedOffsets[k]
      z[#z + 1] = newAckedOffsets[k + 1]
    end
  end
  for start, stop in pairs(batchDone) do
    for o = math.max(start, front + pre), stop - 1 do
      z[#z + 1] = o
      z[#z + 1] = fmt(o)
    end
  end
  if #z > 0 then
    callEach('ZADD', KEYS[5], z)
  end
  if #newAcked > 0 then
    callEach('HDEL', KEYS[3], newAcked)
    callEach('ZREM', KEYS[4], newAcked)
  end
end
-- the ranges acknowledged in: counted, and forgotten once every event of one is
if rangeAcks > 0 then
  redis.call('DECRBY', KEYS[16], rangeAcks)
  for _, r in ipairs(ranges) do
    if r.touched and not r.split then
      if r.acked >= r.stop - r.start then
        dropRange(KEYS[13], KEYS[14], KEYS[15], KEYS[16], r)
      else
        redis.call('HSET', KEYS[13], r.key, rangeInfo(r))
      end
    end
  end
end
local z = {}
for _, m in ipairs(moved) do
  if not acked[m] and not inRange[m] then -- a range's moved as a whole, above
    z[#z + 1] = expiry[m]
    z[#z + 1] = m
  end
end
if #z > 0 then
  redis.call('ZADD', KEYS[4], unpack(z))
end
local trimmed = trimAcked(pre)
if retried and redis.call('EXISTS', KEYS[10]) == 1 then
  redis.call('SPUBLISH', KEYS[11], '1')
end
res[1], res[2], res[3] = trimmed[1], trimmed[2], trimmed[3]
return res
`)
