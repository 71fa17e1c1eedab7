package eventqueue

// Lease ranges: the events a lease call hands out for the first time (from LeaseNextKey on)
// are one range, not one lease each: a range is a run of offsets with one nonce and one
// expiry, and its events, while it lasts, have no entry of their own in LeaseStateKey and
// LeaseExpiryKey. An acknowledgement of one of them counts it in its range and, behind the
// front, adds it to AckedKey as any acknowledgement does; a range whose events are all
// acknowledged goes. An extend that names every event a range still holds, and nothing else
// of it, moves the range's expiry (the SDK extends whole batches). Anything else an event of
// a range may go through (its lease expires, a retry or a partial extend names it, a plain
// trim removes it) first splits the range: each of its
// events from the front on that is not acknowledged gets the per-event lease it stands for
// (deliveries 1, the range's nonce and expiry), and the per-event rules apply from there on.
// So the common path, lease a batch and acknowledge it, writes one range instead of two
// entries an event, and every status stays what it was with a lease per event (a test runs
// both side by side).

// maxRange is the most events of one range (a lease call of more makes several): an ack
// looks for ranges starting at most this far before its lowest offset.
const maxRange = 1000

// luaRanges is the Lua shared by the scripts that touch ranges. Each function takes its keys
// as arguments: kr LeaseRangesKey, ks LeaseRangeStartKey, ke LeaseRangeExpiryKey, kh
// LeaseRangeHeldKey; kstate, kexp and kacked LeaseStateKey, LeaseExpiryKey and AckedKey.
const luaRanges = `
local maxRange = 1000
local function parseRange(info, s)
  local e, a, n = string.match(info, '^(%d+):(%d+):(.*)$')
  return {start = tonumber(s), stop = tonumber(e), acked = tonumber(a), nonce = n, key = s}
end
local function rangeInfo(r)
  return string.format('%d', r.stop) .. ':' .. string.format('%d', r.acked) .. ':' .. r.nonce
end
-- rangesIn returns the ranges whose first offset ks lists in scores lo … hi, by first offset.
local function rangesIn(kr, ks, lo, hi)
  local out = {}
  local starts = redis.call('ZRANGEBYSCORE', ks, lo, hi)
  for c = 1, #starts, 1000 do
    local part = {unpack(starts, c, math.min(c + 999, #starts))}
    local info = redis.call('HMGET', kr, unpack(part))
    for i, s in ipairs(part) do
      if info[i] then
        out[#out + 1] = parseRange(info[i], s)
      else
        redis.call('ZREM', ks, s)
      end
    end
  end
  return out
end
-- dropRange forgets range r (its held events are counted out).
local function dropRange(kr, ks, ke, kh, r)
  redis.call('HDEL', kr, r.key)
  redis.call('ZREM', ks, r.key)
  redis.call('ZREM', ke, r.key)
  redis.call('DECRBY', kh, r.stop - r.start - r.acked)
end
-- splitRange gives each event of range r from front on that is not acknowledged the
-- per-event lease it stands for, and forgets r.
local function splitRange(kr, ks, ke, kh, kstate, kexp, kacked, r, front)
  local exp = redis.call('ZSCORE', ke, r.key) or '0'
  local from = math.max(r.start, front)
  local acked = {}
  if r.acked > 0 and from < r.stop then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', kacked, from, r.stop - 1)) do
      acked[m] = true
    end
  end
  local st, z = {}, {}
  for o = r.stop - 1, from, -1 do -- greatest first: a small sorted set inserts at its head
    local m = string.format('%d', o)
    if not acked[m] then
      st[#st + 1] = m
      st[#st + 1] = '1:' .. r.nonce
      z[#z + 1] = exp
      z[#z + 1] = m
    end
  end
  if #st > 0 then
    redis.call('HSET', kstate, unpack(st))
    redis.call('ZADD', kexp, unpack(z))
  end
  r.split = true
  dropRange(kr, ks, ke, kh, r)
end
-- splitRangesBefore splits every range that starts before offset 'before'.
local function splitRangesBefore(kr, ks, ke, kh, kstate, kexp, kacked, before, front)
  for _, r in ipairs(rangesIn(kr, ks, '-inf', '(' .. string.format('%d', before))) do
    splitRange(kr, ks, ke, kh, kstate, kexp, kacked, r, front)
  end
end
-- rangesHeld counts the events held by ranges whose expiry is after now.
local function rangesHeld(kr, ke, now)
  local n = 0
  local starts = redis.call('ZRANGEBYSCORE', ke, '(' .. now, '+inf')
  for c = 1, #starts, 1000 do
    local part = {unpack(starts, c, math.min(c + 999, #starts))}
    local info = redis.call('HMGET', kr, unpack(part))
    for i, s in ipairs(part) do
      if info[i] then
        local r = parseRange(info[i], s)
        n = n + r.stop - r.start - r.acked
      end
    end
  end
  return n
end
`
