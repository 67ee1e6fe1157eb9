-- Concurrency slots as leases: KEYS[1] a sorted set of lease ids scored by
-- their expiry on Redis' clock, so a crashed gateway's slots come back by
-- themselves; KEYS[2] (in the same slot) the ids released before their
-- acquire arrived, scored by when that release is forgotten: an acquire
-- that timed out at its caller may still run here after the caller has
-- released it, and must then take nothing. ARGV[3..6]: op (1 acquire,
-- 2 release), limit, ttl (ms), lease id. Returns {acquired (0/1), held}.
begin(KEYS, ARGV)
local key, released = KEYS[1], KEYS[2]
local op, limit, ttl, id = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
redis.call('ZREMRANGEBYSCORE', key, '-inf', NOW)
redis.call('ZREMRANGEBYSCORE', released, '-inf', NOW)
-- expire gives k the lifetime of its last member.
local function expire(k)
  local top = tonumber(redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIRE', k, top - NOW + slack)
end
if op == 2 then
  if redis.call('ZREM', key, id) == 0 then
    -- Not held (yet): remember the release for as long as the lease
    -- would have lasted.
    redis.call('ZADD', released, NOW + ttl, id)
    expire(released)
  end
  return {1, redis.call('ZCARD', key)}
end
local n = redis.call('ZCARD', key)
if redis.call('ZSCORE', released, id) then return {0, n} end
if n >= limit then return {0, n} end
redis.call('ZADD', key, NOW + ttl, id)
expire(key)
return {1, n + 1}
