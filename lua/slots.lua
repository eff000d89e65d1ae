-- slots.lua: concurrency slot leases. One sorted set per scope; each member
-- is a lease id scored by its expiry in microseconds of Redis time, so a
-- gateway that dies loses its leases only until they expire.
--
-- KEYS[1]  the slot set, e.g. tenant:{acme}:slots:uploads
-- ARGV[1]  operation: acquire | renew | release
-- ARGV[2]  lease id (unique per request)
-- ARGV[3]  slots: how many leases may be held at once   (acquire)
-- ARGV[4]  lease: microseconds a lease lives unrenewed  (acquire, renew)
--
-- Reply:
--   acquire  {1, held} when a slot was taken (held counts it), {0, held} when full;
--            expired leases are dropped first
--   renew    1 when the lease was extended, 0 when it is gone (expired or
--            released: the slot may have been reissued)
--   release  1 when the lease was removed, 0 when it was already gone (idempotent)
--
-- The set's TTL follows its latest lease, so an idle scope costs no memory.

local key, op, id = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function expire_with_latest()
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    local ms = math.ceil((tonumber(last[2]) - now) / 1000)
    redis.call('PEXPIRE', key, math.max(ms, 1))
  end
end

if op == 'acquire' then
  local slots, lease = tonumber(ARGV[3]), tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local held = redis.call('ZCARD', key)
  if held >= slots then
    return {0, held}
  end
  redis.call('ZADD', key, string.format('%.0f', now + lease), id)
  expire_with_latest()
  return {1, held + 1}
elseif op == 'renew' then
  local lease = tonumber(ARGV[4])
  local score = redis.call('ZSCORE', key, id)
  if not score or tonumber(score) <= now then
    redis.call('ZREM', key, id)
    return 0
  end
  redis.call('ZADD', key, 'XX', string.format('%.0f', now + lease), id)
  expire_with_latest()
  return 1
elseif op == 'release' then
  return redis.call('ZREM', key, id)
end
return redis.error_reply('slots.lua: unknown operation ' .. tostring(op))
