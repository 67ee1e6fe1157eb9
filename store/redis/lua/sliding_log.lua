-- Sliding-window log: a sorted set with one member per unit of cost, scored
-- by its time; members are "<ms>.<k>", unique without randomness because k
-- counts on from the members already at that millisecond. Members that have
-- left the window are removed only when a request is charged, so a refusal
-- or a query writes nothing, and at most cost + trim of them a call, so
-- that one call's work does not grow with what has left the window. See
-- algo.slidingLog.
-- It reads and writes Redis itself: log(key, n, period, cost, write)
-- returns the first five values of an algorithm (write false: change nothing).
local trim = 32
log = function(key, n, period, cost, write)
  local now = NOW
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if newest then
    newest = tonumber(newest)
    if now < newest then now = newest end
  end
  local cutoff = now - period
  local after = string.format('(%d', cutoff)
  local used = redis.call('ZCOUNT', key, after, '+inf')
  local allowed, retry = 0, 0
  if used + cost <= n then
    allowed = 1
    if cost > 0 and not write then
      used, newest = used + cost, now
    elseif cost > 0 then
      -- What has left the window goes a bounded number at a time (the
      -- count above never includes it): removing a whole log at once, up
      -- to algo.MaxLogRate members, held Redis for tens of ms, past every
      -- caller's deadline; and a batch holds up to 64 decisions, so trim
      -- is small (64 × 32 members, about a ms). Removing cost + trim a call
      -- removes more than the call adds, so what is left over still goes,
      -- and a log never holds much more than its limit.
      local old = redis.call('ZCOUNT', key, '-inf', cutoff)
      if old > 0 then
        redis.call('ZREMRANGEBYRANK', key, 0, math.min(old, cost + trim) - 1)
      end
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
      redis.call('PEXPIRE', key, period + (now - NOW) + slack)
    end
  else
    local need = used + cost - n
    local e = redis.call('ZRANGE', key, after, '+inf', 'BYSCORE', 'LIMIT', need - 1, 1, 'WITHSCORES')
    retry = tonumber(e[2]) + period - now
  end
  local rem, reset = 0, 0
  if n > used then rem = n - used end
  if used > 0 then reset = newest + period - now end
  return finish(now, allowed, rem, reset, retry, 0)
end
