-- Concurrency slots as leases: a sorted set of lease ids scored by their
-- expiry on Redis' clock, so a crashed gateway's slots come back by
-- themselves. KEYS[1]; ARGV[3..6]: op (1 acquire, 2 release), limit,
-- ttl (ms), lease id. Returns {acquired (0/1), held}.
begin(KEYS, ARGV)
local key = KEYS[1]
local op, limit, ttl, id = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
redis.call('ZREMRANGEBYSCORE', key, '-inf', NOW)
if op == 2 then
  redis.call('ZREM', key, id)
  return {1, redis.call('ZCARD', key)}
end
local n = redis.call('ZCARD', key)
if n >= limit then return {0, n} end
redis.call('ZADD', key, NOW + ttl, id)
local top = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
redis.call('PEXPIRE', key, top - NOW + slack)
return {1, n + 1}
