-- Token bucket: state "tokens:last_ms" (tokens in 1/period units); see algo.tokenBucket.
algs[1] = function(key, n, period, cap, cost, write, md)
  local now = NOW
  local capU = cap * period
  local tk, last = pair(redis.call('GET', key))
  if not tk then tk, last = 0, 0 end
  if now < last then now = last end
  if tk > capU then tk = capU end
  local el = now - last
  if el >= cdiv(capU - tk, n) then tk = capU else tk = tk + el * n end
  local need = cost * period
  local allowed, retry = 0, 0
  if tk >= need then
    allowed = 1
    tk = tk - need
    if write and cost > 0 then
      redis.call('SET', key, string.format('%d:%d', tk, now), 'PX', px(now, cdiv(capU - tk, n)))
    end
  else
    retry = cdiv(need - tk, n)
  end
  return finish(now, allowed, fdiv(tk, period), cdiv(capU - tk, n), retry)
end
