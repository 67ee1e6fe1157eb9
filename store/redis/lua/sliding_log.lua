-- Sliding-window log: a sorted set with one member per charged request,
-- scored by its time, named "<before>:<after>": the units the log had
-- admitted before it and after it, counted from the key's creation and
-- written with 20 digits so that names order as the numbers do. The units
-- in the window are the newest member's after less the before of the first
-- member in the window, so what one decision reads and writes does not
-- grow with its cost (a member per unit did: 100,000 members for a request
-- of cost 100,000, hundreds of ms of Redis). Members that have left the
-- window are removed only when a request is charged, so a refusal or a
-- query writes nothing, and at most 1 + trim of them a call, so that one
-- call's work does not grow with what has left the window either. See
-- algo.slidingLog: the units of one member leave the window together, as
-- the units of one request at one millisecond do there.
-- It reads and writes Redis itself: log(key, n, period, cost, write)
-- returns the first five values of an algorithm (write false: change nothing).
local trim = 32
-- counts returns a member's before and after.
local function counts(member)
  local b, a = string.match(member, '^(%d+):(%d+)$')
  return tonumber(b), tonumber(a)
end
log = function(key, n, period, cost, write)
  local now = NOW
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local newest, total = nil, 0
  if last[1] then
    newest = tonumber(last[2])
    local _, a = counts(last[1])
    total = a
    if now < newest then now = newest end
  end
  local cutoff = now - period
  -- old: members out of the window, which rank before every member in it.
  -- b0: the running total before the first member in the window.
  local old, used, b0 = 0, 0, 0
  if newest then
    old = redis.call('ZCOUNT', key, '-inf', cutoff)
    local first = redis.call('ZRANGE', key, old, old)[1]
    if first then
      b0 = counts(first)
      used = total - b0
    end
  end
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
      -- is small (64 × 32 members, about a ms). Removing 1 + trim a call
      -- removes more than the call adds, so what is left over still goes,
      -- and a log never holds much more than its limit's requests.
      if old > 0 then
        redis.call('ZREMRANGEBYRANK', key, 0, math.min(old, 1 + trim) - 1)
      end
      redis.call('ZADD', key, now, string.format('%020d:%020d', total, total + cost))
      used = used + cost
      newest = now
      redis.call('PEXPIRE', key, period + (now - NOW) + slack)
    end
  else
    -- Refused until enough has left the window: the first member (in
    -- order, from the first in the window) whose leaving frees need units.
    local need = used + cost - n
    local lo, hi = old, redis.call('ZCARD', key) - 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local _, a = counts(redis.call('ZRANGE', key, mid, mid)[1])
      if a - b0 >= need then hi = mid else lo = mid + 1 end
    end
    local e = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')
    retry = tonumber(e[2]) + period - now
  end
  local rem, reset = 0, 0
  if n > used then rem = n - used end
  if used > 0 then reset = newest + period - now end
  return finish(now, allowed, rem, reset, retry, 0)
end
