-- token_bucket.lua: GCRA token buckets over integer microseconds, checked
-- and spent all-or-nothing in one call. Time comes from Redis TIME, never
-- from the caller's clock.
--
-- KEYS[i]   the key of bucket i (on Redis Cluster all share one hash tag)
-- ARGV[1]   cost: tokens the request takes from every bucket (>= 1)
-- then per bucket i, three values:
--   ARGV[3i-1]  capacity: requests allowed back to back from a full bucket
--   ARGV[3i]    interval: microseconds per token (the sustained rate)
--   ARGV[3i+1]  shadow: 1 = count and report, never refuse
--
-- A bucket stores its theoretical arrival time (TAT) in microseconds; it is
-- full when TAT <= now, and holds floor((capacity*interval - (TAT-now)) /
-- interval) tokens.
--
-- Reply: a flat array of 4 integers per bucket, in KEYS order:
--   allowed         1 when this bucket holds `cost` tokens, else 0 (the
--                   request is refused when any non-shadow bucket says 0)
--   remaining       tokens left after this request (before it, if refused)
--   retry_after_ms  until this bucket holds `cost` tokens; 0 when allowed;
--                   -1 when cost exceeds capacity (never)
--   reset_after_ms  until the bucket is full again
--
-- Writes: nothing when any non-shadow bucket refuses. Otherwise every bucket
-- that had the tokens gets its new TAT, with a TTL equal to its time-to-full,
-- so an idle bucket's key disappears exactly when it would read as full.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])

local function ceil_ms(us)
  if us <= 0 then return 0 end
  return math.ceil(us / 1000)
end

local function tokens(tau, tat, interval)
  local left = math.floor((tau - (tat - now)) / interval)
  if left < 0 then return 0 end
  return left
end

local n = #KEYS
local tats, new_tats, out = {}, {}, {}
local refused = false
for i = 1, n do
  local capacity = tonumber(ARGV[3 * i - 1])
  local interval = tonumber(ARGV[3 * i])
  local shadow = ARGV[3 * i + 1] == '1'
  local tau = capacity * interval
  local tat = tonumber(redis.call('GET', KEYS[i]) or now) or now
  if tat < now then tat = now end
  tats[i] = tat
  local allowed, retry = 0, -1
  if cost <= capacity then
    local new_tat = tat + cost * interval
    local allow_at = new_tat - tau
    if now >= allow_at then
      allowed, retry = 1, 0
      new_tats[i] = new_tat
    else
      retry = ceil_ms(allow_at - now)
    end
  end
  if allowed == 0 and not shadow then refused = true end
  out[4 * i - 3] = allowed
  out[4 * i - 2] = tokens(tau, tat, interval)
  out[4 * i - 1] = retry
  out[4 * i] = ceil_ms(tat - now)
end

if not refused then
  for i = 1, n do
    local new_tat = new_tats[i]
    if new_tat then
      local interval = tonumber(ARGV[3 * i])
      local tau = tonumber(ARGV[3 * i - 1]) * interval
      out[4 * i - 2] = tokens(tau, new_tat, interval)
      out[4 * i] = ceil_ms(new_tat - now)
      redis.call('SET', KEYS[i], string.format('%.0f', new_tat), 'PX', math.max(1, ceil_ms(new_tat - now)))
    end
  end
end
return out
