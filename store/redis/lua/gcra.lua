-- GCRA: state "tat_ms:fraction" (fraction in 1/n ms); see algo.gcra.
algs[0] = function(key, n, period, cap, cost, write, md)
  local now = NOW
  local capU = cap * period
  local d = 0
  local a, b = pair(redis.call('GET', key))
  if a then
    local lo = a - cdiv(capU, n)
    if now < lo then now = lo end -- the state was written no earlier than lo
    if a > now or (a == now and b > 0) then d = (a - now) * n + b end
  end
  local nd = d + cost * period
  local allowed, retry = 0, 0
  if nd <= capU then
    allowed = 1
    if write and cost > 0 then
      local q = fdiv(nd, n)
      redis.call('SET', key, string.format('%d:%d', now + q, nd - q * n), 'PX', px(now, cdiv(nd, n)))
    end
    d = nd
  else
    retry = cdiv(nd - capU, n)
  end
  local rem = 0
  if capU > d then rem = fdiv(capU - d, period) end
  return finish(now, allowed, rem, cdiv(d, n), retry)
end
