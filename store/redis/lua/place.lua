-- Entry point for places in a shaping queue (algo.Place): KEYS[1] the
-- limit's state; the request packed in A[3] as for decide.lua (a
-- leaky_bucket with max delay); A[4] the operation: 1 takes a place
-- (decides the request as decide.lua would) and answers its five values
-- and the state it left (level, last: the place); 2 gives back the place
-- A[5] (level), A[6] (last) taken with the request's cost if the state
-- is still exactly that (the place is the last in the queue), and answers
-- five values: 1 if given back, then a query's (cost 0) values after it.
-- See algo.Prepared.Taking and GivingBack.
local function place_op()
  tick()
  local op = tonumber(A[4])
  local _, n, period, cap, cost, md, _, _, _, _, _, wd = unpack_('<dddddddddddd', REQS)
  local key = K[1]
  local x, y = parse(STATE[2], redis.call('GET', key))
  if op == 1 then
    local allowed, rem, reset, retry, delay, w1, w2, _, ttl = algs[2](x, y, nil, n, period, cap, cost, md, nil, nil, nil, nil, nil, wd, 0)
    local l1, l2 = 0, 0
    if w1 then
      store(key, 2, w1, w2, nil, ttl)
      l1, l2 = w1, w2
    end
    return pack('<ddddddd', allowed, rem, reset, retry, delay, l1, l2)
  end
  local lvl, last = tonumber(A[5]), tonumber(A[6])
  local need = cost * period
  local given = 0
  -- Only while the place's turn is still ahead (see algo.giveBack).
  local capU = cap * period
  if x and x == lvl and y == last and x >= need and need > 0 and lvl > capU and NOW < last + ceil((lvl - capU) / n) then
    given = 1
    x = x - need
  end
  local _, rem, reset, retry, delay = algs[2](x, y, nil, n, period, cap, 0, md)
  if given == 1 then
    if reset > 0 then
      store(key, 2, x, y, nil, reset)
    else
      redis.call('DEL', key)
    end
  end
  return pack('<ddddd', given, rem, reset, retry, delay)
end
