-- Leaky bucket as a meter, or with md > 0 as a shaper: state level (in
-- 1/period units), last_ms; the level may rise md×n units past the
-- capacity, and a request that ends above it waits (delay) until it has
-- drained back. See algo.leakyBucket.
STATE[2] = '<dd'
algs[2] = function(lvl, last, _, n, period, cap, cost, md)
  local now = NOW
  local capU = cap * period
  local limU = capU + md * n
  if not lvl then lvl, last = 0, 0 end
  if now < last then now = last end
  if lvl > limU then lvl = limU end
  local el = now - last
  if el >= ceil(lvl / n) then lvl = 0 else lvl = lvl - el * n end
  local need = cost * period
  local allowed, retry, delay, w1, w2, ttl = 0, 0, 0
  if lvl + need <= limU then
    allowed = 1
    lvl = lvl + need
    if lvl > capU then delay = ceil((lvl - capU) / n) end
    if cost > 0 then w1, w2, ttl = lvl, now, ceil(lvl / n) end
  else
    retry = ceil((lvl + need - limU) / n)
  end
  local rem = 0
  if capU > lvl then rem = floor((capU - lvl) / period) end
  return finish(now, allowed, rem, ceil(lvl / n), retry, delay, w1, w2, nil, ttl)
end
