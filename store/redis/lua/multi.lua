-- Entry point for several limits decided all or nothing (all in one hash
-- slot). Every limit is first decided without writing. If all allow, all
-- are charged, in order; if any refuses, nothing is, and the limits that
-- would have allowed report their state as it is (decided at cost 0).
-- multi_all answers the k requests (see answer).
local function multi_all()
  local k = #REQS / REQ
  tick()
  local out, all = OUT, true
  if k > 1 then prefetch(k) end
  for i = 1, k do
    local o = i * 5 - 5
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = decide(i, false)
    if not out[o + 1] then return redis.error_reply(errmsg(out[o + 2])) end
    if out[o + 1] == 0 then all = false end
  end
  for i = 1, k do
    local o = i * 5 - 5
    if all then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = decide(i, true)
      if not out[o + 1] then return redis.error_reply(errmsg(out[o + 2])) end
    elseif out[o + 1] == 1 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = decide(i, false, true)
    end
  end
  local failed = flush()
  if failed then
    local _, e = next(failed)
    return redis.error_reply(errmsg(e))
  end
  return answer(k)
end
