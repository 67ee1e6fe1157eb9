-- Token bucket: state tokens (in 1/period units), last_ms; see algo.tokenBucket.
STATE[1] = '<dd'
algs[1] = function(tk, last, _, n, period, cap, cost)
  local now = NOW
  local capU = cap * period
  if not tk then tk, last = 0, 0 end
  if now < last then now = last end
  if tk > capU then tk = capU end
  local el = now - last
  if el >= ceil((capU - tk) / n) then tk = capU else tk = tk + el * n end
  local need = cost * period
  local allowed, retry, w1, w2, ttl = 0, 0
  if tk >= need then
    allowed = 1
    tk = tk - need
    if cost > 0 then w1, w2, ttl = tk, now, ceil((capU - tk) / n) end
  else
    retry = ceil((need - tk) / n)
  end
  return finish(now, allowed, floor(tk / period), ceil((capU - tk) / n), retry, 0, w1, w2, nil, ttl)
end
