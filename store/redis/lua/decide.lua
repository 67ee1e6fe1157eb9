-- Entry point for k independent single-limit requests, one or coalesced
-- (on Redis Cluster all in one hash slot). The requests are decided in
-- order, each on its own, as separate calls made in the same millisecond
-- would decide them. They are not all or nothing: a request that fails
-- (say, WRONGTYPE on a key written by something else) yields an error
-- reply in its first slot and leaves the others' decisions standing.
-- decide_all returns the k results flattened, 5 values each.
local function decide_all()
  local k = #REQS / REQ
  local out = {}
  for i = 1, k do
    local o = i * 5 - 5
    local r1, r2, r3, r4, r5 = decide(i, true)
    if r1 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = r1, r2, r3, r4, r5
    else
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = redis.error_reply(errmsg(r2)), 0, 0, 0, 0
    end
  end
  local failed = flush()
  if failed then
    for i = 1, k do
      local e = failed[K[i]]
      if e then out[i * 5 - 4] = redis.error_reply(errmsg(e)) end
    end
  end
  return out
end
