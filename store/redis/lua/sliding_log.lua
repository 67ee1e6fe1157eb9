-- Sliding-window log: a sorted set with one member per unit of cost, scored
-- by its time; members are "<ms>.<k>", unique without randomness because k
-- counts on from the members already at that millisecond. See algo.slidingLog.
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
if newest then
  newest = tonumber(newest)
  if now < newest then now = newest end
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
local used = redis.call('ZCARD', key)
if used == 0 then newest = nil end
local allowed, retry = 0, 0
if used + cost <= n then
  allowed = 1
  if cost > 0 then
    local base = redis.call('ZCOUNT', key, now, now)
    local i = 1
    while i <= cost do
      local args = {}
      local j = 0
      while i <= cost and j < 1000 do
        args[2 * j + 1] = now
        args[2 * j + 2] = string.format('%d.%d', now, base + i)
        i = i + 1
        j = j + 1
      end
      redis.call('ZADD', key, unpack(args))
    end
    used = used + cost
    newest = now
    redis.call('PEXPIRE', key, px(period))
  end
else
  local need = used + cost - n
  local e = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
  retry = tonumber(e[2]) + period - now
end
local rem, reset = 0, 0
if n > used then rem = n - used end
if newest then reset = newest + period - now end
return finish(allowed, rem, reset, retry)
