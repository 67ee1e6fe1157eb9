-- Entry point for attempts held on one rate limit (algo.Hold): KEYS[1]
-- the limit's state, KEYS[2] (in the same slot) its holds, a sorted set of
-- hold ids scored by expiry; the request packed in A[3] as for decide.lua;
-- A[4] the operation (1 reserve, 2 give back, 3 charge), A[5] the hold id,
-- A[6] its ttl (ms). Reserving admits the attempt only if the limit could
-- take the cost of every attempt held and this one (algo.Prepared.Reserve)
-- and changes no state but the holds; settling removes the hold and, to
-- charge, decides the request as decide.lua would. Answers the request as
-- decide.lua does (see answer).
local function reserve_one()
  tick()
  local op, id, ttl = tonumber(A[4]), A[5], tonumber(A[6])
  local hkey = K[2]
  redis.call('ZREMRANGEBYSCORE', hkey, '-inf', NOW)
  if op ~= 1 then
    redis.call('ZREM', hkey, id)
    local r1, r2, r3, r4, r5 = decide(1, op == 3, op ~= 3)
    if not r1 then return redis.error_reply(errmsg(r2)) end
    local failed = flush()
    if failed then
      local _, e = next(failed)
      return redis.error_reply(errmsg(e))
    end
    OUT[1], OUT[2], OUT[3], OUT[4], OUT[5] = r1, r2, r3, r4, r5
    return answer(1)
  end
  local _, _, _, cap, cost = unpack_('<ddddd', REQS, 1)
  local again = redis.call('ZSCORE', hkey, id)
  local held = redis.call('ZCARD', hkey)
  if again then held = held - 1 end
  local total = (held + 1) * cost
  local r1, r2, r3, r4, r5 = decide(1, false, false, math.min(total, cap))
  if not r1 then return redis.error_reply(errmsg(r2)) end
  if total > cap then
    r1, r2, r4 = 0, 0, math.max(r4, r3, 1)
  end
  if r1 == 1 and not again then
    redis.call('ZADD', hkey, NOW + ttl, id)
    local top = tonumber(redis.call('ZRANGE', hkey, -1, -1, 'WITHSCORES')[2])
    redis.call('PEXPIRE', hkey, top - NOW + slack)
  end
  OUT[1], OUT[2], OUT[3], OUT[4], OUT[5] = r1, r2, r3, r4, r5
  return answer(1)
end
