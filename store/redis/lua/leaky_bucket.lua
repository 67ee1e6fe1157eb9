-- Leaky bucket as a meter, or with md > 0 as a shaper: state "level:last_ms"
-- (level in 1/period units); the level may rise md×n units past the
-- capacity, and a request that ends above it waits (delay) until it has
-- drained back. See algo.leakyBucket.
algs[2] = function(key, n, period, cap, cost, write, md)
  local now = NOW
  local capU = cap * period
  local limU = capU + md * n
  local lvl, last = pair(redis.call('GET', key))
  if not lvl then lvl, last = 0, 0 end
  if now < last then now = last end
  if lvl > limU then lvl = limU end
  local el = now - last
  if el >= cdiv(lvl, n) then lvl = 0 else lvl = lvl - el * n end
  local need = cost * period
  local allowed, retry, delay = 0, 0, 0
  if lvl + need <= limU then
    allowed = 1
    lvl = lvl + need
    if lvl > capU then delay = cdiv(lvl - capU, n) end
    if write and cost > 0 then
      redis.call('SET', key, string.format('%d:%d', lvl, now), 'PX', px(now, cdiv(lvl, n)))
    end
  else
    retry = cdiv(lvl + need - limU, n)
  end
  local rem = 0
  if capU > lvl then rem = fdiv(capU - lvl, period) end
  return finish(now, allowed, rem, cdiv(lvl, n), retry, delay)
end
