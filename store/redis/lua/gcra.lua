-- GCRA: state tat_ms, fraction (in 1/n ms); see algo.gcra.
STATE[0] = '<dd'
algs[0] = function(a, b, _, n, period, cap, cost)
  local now = NOW
  local capU = cap * period
  local d = 0
  if a then
    local lo = a - floor((capU - b) / n)
    if now < lo then now = lo end -- written no earlier than when its debt was capU
    if a > now or (a == now and b > 0) then d = (a - now) * n + b end
  end
  local nd = d + cost * period
  local allowed, retry, w1, w2, ttl = 0, 0
  if nd <= capU then
    allowed = 1
    if cost > 0 then
      local q = floor(nd / n)
      w1, w2, ttl = now + q, nd - q * n, ceil(nd / n)
    end
    d = nd
  else
    retry = ceil((nd - capU) / n)
  end
  local rem = 0
  if capU > d then rem = floor((capU - d) / period) end
  return finish(now, allowed, rem, ceil(d / n), retry, 0, w1, w2, nil, ttl)
end
