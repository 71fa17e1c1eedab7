package ratelimit

import "github.com/redis/go-redis/v9"

// keyPrefix is the prefix of every budget's key: github.com/go-redis/redis_rate's, whose state
// (the theoretical arrival time, in seconds since 2017-01-01) spendBudgets keeps unchanged, so
// api processes of either version share budgets during a rolling upgrade.
const keyPrefix = "rate:"

// epoch2017 is redis_rate's epoch: times are seconds since then, so that they keep microsecond
// precision in a double.
const epoch2017 = 1483228800

// spendBudgets is the generic cell rate algorithm of github.com/go-redis/redis_rate (after
// Pavel Pravosud's redis-gcra), cost 1, for several budgets in one atomic call: the budgets
// are spent in the order of KEYS, and the first that refuses ends the call, so a refused
// request spends nothing of the budgets after it, as if each had been checked in turn. The
// time is the caller's clock, not Redis's, so that the service's clock decides every budget.
//
// KEYS: the budgets. ARGV[1]: now, in seconds since 2017-01-01; then, per key, burst, rate,
// period in seconds and peek ("1": decide, but spend nothing). Returns, per budget checked: allowed (1 or 0), remaining, and the seconds
// until a request is allowed again as a string ("-1" when allowed).
var spendBudgets = redis.NewScript(`
local now = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local burst = tonumber(ARGV[4 * i - 2])
  local rate = tonumber(ARGV[4 * i - 1])
  local period = tonumber(ARGV[4 * i])
  local peek = ARGV[4 * i + 1] == '1'

  local emission_interval = period / rate
  local burst_offset = emission_interval * burst

  local tat = redis.call("GET", key)
  if not tat then
    tat = now
  else
    tat = tonumber(tat)
  end
  tat = math.max(tat, now)

  local new_tat = tat + emission_interval
  local diff = now - (new_tat - burst_offset)
  local remaining = diff / emission_interval

  if remaining < 0 then
    out[#out + 1] = 0
    out[#out + 1] = 0
    out[#out + 1] = tostring(-diff)
    return out
  end

  local reset_after = new_tat - now
  if reset_after > 0 and not peek then
    redis.call("SET", key, new_tat, "EX", math.ceil(reset_after))
  end
  out[#out + 1] = 1
  out[#out + 1] = remaining
  out[#out + 1] = "-1"
end
return out
`)
