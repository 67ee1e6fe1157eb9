-- Entry points for k independent single-limit requests, one or coalesced
-- (on Redis Cluster all in one hash slot): decide_all, and decide_one for
-- a lone request on Redis' clock. The requests are decided in order, each
-- on its own, as separate calls made in the same millisecond would decide
-- them. They are not all or nothing: a request that fails (say, WRONGTYPE
-- on a key written by something else) gets its error in the answer and
-- leaves the others' decisions standing.
--
-- spaced decides a lone GCRA request on Redis' clock whose limit spaces
-- requests a whole number of milliseconds apart (its period a multiple of
-- its rate). Its state is then the debt alone, in whole milliseconds: the
-- TTL of its key (every GCRA key expires when its debt is paid), which
-- PTTL reads on Redis' own clock, so the decision needs neither TIME nor
-- GET, and one SET (with GET, to see what it replaced) writes it back:
-- two commands instead of three, for the most common call of a fleet of
-- gateways at low concurrency. It writes '' as the value (read reads such
-- a key on the other paths). A key without a TTL is not one it knows: it
-- returns nil for lone to decide as usual. A key that held something
-- else than a state (counts as none) is decided again afresh; a key of
-- another type fails the call, as on the other paths. See spaceable.
local function spaced(key, n, period, cap, cost)
  local d = redis.call('PTTL', key)
  if d == -1 then return nil end
  -- algs[0] decided at 0 with the debt due at d (its durations relative),
  -- written out in whole ms: every term is a multiple of the spacing s
  -- but d. One Lua function instead of four, and no TIME, on the path
  -- where Lua is most of what a call costs Redis (spaced_test checks it
  -- against package algo).
  local s = period / n -- the spacing
  local top = cap * s  -- the most debt the limit holds
  local live, off = d >= 0, 0
  if d < 0 then
    d = 0
  elseif d > top then
    off, d = d - top, top -- more debt than the limit holds (it was made smaller)
  end
  local nd = d + cost * s
  local allowed, retry, old = 1, 0
  if nd > top then
    allowed, retry, nd = 0, nd - top + off, d
    if live then old = redis.call('GET', key) end
  elseif cost > 0 then
    old = redis.call('SET', key, '', 'PX', nd, 'GET')
  elseif live then
    old = redis.call('GET', key)
  end
  if old and old ~= '' and not parse(STATE[0], old) then
    -- Not a state: decided again, as a key that held none.
    allowed, retry, off, nd = 1, 0, 0, cost * s
    if nd > top then
      allowed, retry, nd = 0, nd - top, 0
    elseif cost > 0 then
      redis.call('SET', key, '', 'PX', nd)
    end
  end
  local rem = top - nd
  rem = (rem - rem % s) / s
  if nd > 0 then nd = nd + off end
  return allowed, rem, nd, retry, 0
end
-- SPACED[i] is true for request i of a batch that spaced decides
-- (reused from call to call, like the cache).
local SPACED = {}
-- spaceable reports whether spaced decides a request of algorithm a,
-- rate n and period (ms) on Redis' clock: GCRA under a limit that spaces
-- requests a whole number of milliseconds apart.
local function spaceable(a, n, period) return a == 0 and period % n == 0 end
-- eligible reports whether spaced decides request i of the call.
local function eligible(i)
  if not REDIS_CLOCK then return false end
  return spaceable(unpack_('<ddd', REQS, i * REQ - REQ + 1))
end
-- lone decides a call's only request as decide and flush would, but
-- without the cache, which one request has nothing to share through: the
-- path of a gateway deciding on its own, the most common call of all. It
-- returns the five values, or false and the error. A command that fails
-- (GET or SET on a key of another type) fails the call, which is the
-- request's error: no pcall to pay for.
local function lone()
  local key = K[1]
  local a, n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb = unpack_('<ddddddddddddd', REQS)
  tick()
  if cal > 0 and (NOW < b0 or NOW >= b3) then return false, skewed(b0, b3) end
  if a == 4 then
    local ok, r1, r2, r3, r4, r5 = pcall(log, key, n, period, cost, true)
    if not ok then return false, r1 end
    return r1, r2, r3, r4, r5
  end
  local x, y, z, d = read(key, a, redis.call('GET', key))
  local allowed, rem, reset, retry, delay, w1, w2, w3, ttl = algs[a](x, y, z, n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb, d)
  if w1 then store(key, a, w1, w2, w3, ttl) end
  return allowed, rem, reset, retry, delay
end
-- decide_all answers the k requests (see answer).
local function decide_all()
  local k = #REQS / REQ
  if k == 1 then
    local r1, r2, r3, r4, r5 = lone()
    if not r1 then
      OUT[1], OUT[2], OUT[3], OUT[4], OUT[5] = 0, 0, 0, 0, 0
      return answer(1, {r2})
    end
    return pack('<ddddd', r1, r2, r3, r4, r5)
  end
  -- Requests spaced decides skip TIME and the cache, each on its own
  -- (in a pcall: a key of another type fails its request alone); the
  -- others are decided as below, if there are any.
  local others = false
  for i = 1, k do
    SPACED[i] = eligible(i)
    if not SPACED[i] then others = true end
  end
  if others then
    tick()
    prefetch(k, SPACED)
  end
  local errs
  for i = 1, k do
    local o = i * 5 - 5
    local ok, r1, r2, r3, r4, r5 = true
    if SPACED[i] and not slot[K[i]] then
      local _, n, period, cap, cost = unpack_('<ddddd', REQS, i * REQ - REQ + 1)
      ok, r1, r2, r3, r4, r5 = pcall(spaced, K[i], n, period, cap, cost)
      if ok and not r1 then
        tick()
        r1, r2, r3, r4, r5 = decide(i, true)
      elseif not ok then
        r1, r2 = false, r1
      end
    else
      r1, r2, r3, r4, r5 = decide(i, true)
    end
    if r1 then
      OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5] = r1, r2, r3, r4, r5
    else
      OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5] = 0, 0, 0, 0, 0
      errs = errs or {}
      errs[i] = r2
    end
  end
  local failed = flush()
  if failed then
    for i = 1, k do
      local e = failed[K[i]]
      if e then
        errs = errs or {}
        errs[i] = e
      end
    end
  end
  return answer(k, errs)
end
-- decide_one is the entry point of a lone request on Redis' clock (the
-- store's calls of one request): straight to spaced when it can decide
-- it, without begin's and decide_all's work, which in Redis' Lua cost a
-- fifth of such a call; else, and for a key spaced does not know, as
-- decide_all decides it.
local function decide_one(k, a)
  if not pack then init() end
  if a[1] == '' then
    local alg, n, period, cap, cost = unpack_('<ddddd', a[3])
    if alg == 0 and period % n == 0 then -- spaceable, written out
      local r1, r2, r3, r4, r5 = spaced(k[1], n, period, cap, cost)
      if r1 then return pack('<ddddd', r1, r2, r3, r4, r5) end
    end
  end
  begin(k, a, true)
  reset()
  return decide_all()
end
