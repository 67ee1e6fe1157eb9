-- Leaky bucket as a meter: state "level:last_ms" (level in 1/period units); see algo.leakyBucket.
algs[2] = function(key, n, period, cap, cost, write)
  local now = NOW
  local capU = cap * period
  local lvl, last = pair(redis.call('GET', key))
  if not lvl then lvl, last = 0, 0 end
  if now < last then now = last end
  if lvl > capU then lvl = capU end
  local el = now - last
  if el >= cdiv(lvl, n) then lvl = 0 else lvl = lvl - el * n end
  local need = cost * period
  local allowed, retry = 0, 0
  if lvl + need <= capU then
    allowed = 1
    lvl = lvl + need
    if write and cost > 0 then
      redis.call('SET', key, string.format('%d:%d', lvl, now), 'PX', px(now, cdiv(lvl, n)))
    end
  else
    retry = cdiv(lvl + need - capU, n)
  end
  return finish(now, allowed, fdiv(capU - lvl, period), cdiv(lvl, n), retry)
end
