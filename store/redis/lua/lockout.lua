-- The login guard's state for one account: KEYS[1] holds "failures:
-- last_failure:level:lock_end:last_lock:spelling" (ms; the failures'
-- spelling, 2^32 for several, may be absent: none), KEYS[2] (in the same
-- slot) the attempts reserved and not yet settled, a sorted set of hold
-- ids scored by expiry. ARGV[3..11]: op (0 check, 1 fail, 2 succeed,
-- 3 reserve, 4 release), threshold, lock, max lock, failure window,
-- offence memory (ms), hold id ("" for none), hold ttl (ms), the
-- request's spelling. Returns {locked, retry_after_ms, failures, level,
-- reserved, held}. See algo.Lockout.
begin(KEYS, ARGV)
local key, hkey = KEYS[1], KEYS[2]
local op, thr = tonumber(ARGV[3]), tonumber(ARGV[4])
local lock, maxlock = tonumber(ARGV[5]), tonumber(ARGV[6])
local win, mem = tonumber(ARGV[7]), tonumber(ARGV[8])
local id, hold = ARGV[9], tonumber(ARGV[10])
local spelling = tonumber(ARGV[11]) or 0
local now = NOW
local f, lf, lvl, lu, ll, sp = 0, 0, 0, 0, 0, 0
local v = redis.call('GET', key)
if v then
  local a, b, c, d, e, g = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):?(%d*)$')
  if a then
    f, lf, lvl, lu, ll, sp = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e), tonumber(g) or 0
  end
end
if now - lf >= win then f = 0 end
if now - ll >= mem then lvl = 0 end
if f == 0 then sp = 0 end
redis.call('ZREMRANGEBYSCORE', hkey, '-inf', now)
if op ~= 0 and op ~= 3 and id ~= '' then redis.call('ZREM', hkey, id) end
local held = redis.call('ZCARD', hkey)
local locked = now < lu
local reserved = 0
if op == 3 then
  if redis.call('ZSCORE', hkey, id) then
    reserved = 1
  elseif not locked and f + held < thr then
    redis.call('ZADD', hkey, now + hold, id)
    held = held + 1
    reserved = 1
    local top = tonumber(redis.call('ZRANGE', hkey, -1, -1, 'WITHSCORES')[2])
    redis.call('PEXPIRE', hkey, top - now + slack)
  end
elseif op == 1 and not locked then
  if f == 0 then
    sp = spelling
  elseif sp ~= spelling then
    sp = 4294967296 -- several spellings: no success clears them
  end
  f = f + 1
  lf = now
  if f >= thr then
    local d = lock
    local i = 0
    while i < lvl and d < maxlock do
      d = d * 2
      i = i + 1
    end
    if d > maxlock then d = maxlock end
    lu, ll = now + d, now
    if lvl < 1048575 then lvl = lvl + 1 end
    f, sp = 0, 0
    locked = true
  end
elseif op == 2 and (f == 0 or sp == spelling) then
  f = 0
end
local ttl = math.max(lu - now, lf + win - now, ll + mem - now, 0)
if f == 0 and lvl == 0 and not locked then ttl = 0 end
if op == 1 or op == 2 then
  if ttl > 0 then
    redis.call('SET', key, string.format('%d:%d:%d:%d:%d:%d', f, lf, lvl, lu, ll, sp), 'PX', ttl + slack)
  elseif v then
    redis.call('DEL', key)
  end
end
local retry = 0
if locked then retry = lu - now end
return {locked and 1 or 0, retry, f, lvl, reserved, held}
