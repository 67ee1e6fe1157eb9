-- Entry point for k independent single-limit requests, one or coalesced
-- (on Redis Cluster all in one hash slot). The requests are decided in
-- order, each on its own, as separate calls made in the same millisecond
-- would decide them. They are not all or nothing: a request that fails
-- (say, WRONGTYPE on a key written by something else) yields an error
-- reply in its first slot and leaves the others' decisions standing.
-- lone decides a call's only request as decide and flush would, but
-- without the cache, which one request has nothing to share through: the
-- path of a gateway deciding on its own, the most common call of all. It
-- returns the five values, or false and the error. A command that fails
-- (GET or SET on a key of another type) fails the call, which is the
-- request's error: no pcall to pay for.
local function lone()
  local a, n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb = unpack_('<ddddddddddddd', REQS)
  if cal > 0 and (NOW < b0 or NOW >= b3) then return false, skewed(b0, b3) end
  local key = K[1]
  if a == 4 then
    local ok, r1, r2, r3, r4, r5 = pcall(log, key, n, period, cost, true)
    if not ok then return false, r1 end
    return r1, r2, r3, r4, r5
  end
  local x, y, z = parse(STATE[a], redis.call('GET', key))
  local allowed, rem, reset, retry, delay, w1, w2, w3, ttl = algs[a](x, y, z, n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb)
  if w1 then
    if REDIS_CLOCK then
      redis.call('SET', key, pack(STATE[a], w1, w2, w3), 'PXAT', ttl + NOW)
    else
      redis.call('SET', key, pack(STATE[a], w1, w2, w3), 'PX', ttl + slack)
    end
  end
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
  prefetch(k)
  local errs
  for i = 1, k do
    local o = i * 5 - 5
    local r1, r2, r3, r4, r5 = decide(i, true)
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
