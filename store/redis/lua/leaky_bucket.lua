-- Leaky bucket as a meter, or with md > 0 as a shaper: state level (in
-- 1/period units), last_ms; the level may rise md×n units past the
-- capacity, and a request that ends above it waits (delay) until it has
-- drained back. A shaper admits a request only if its turn comes within
-- wd ms (its queue threshold; 0: md), and decides one met before the
-- state's last update as of that update, with every duration from NOW
-- (the offset included). See algo.leakyBucket and algo.shaperBehind.
-- With pb > 0 it pushes the schedule back by pb ms instead (algo.pushBack):
-- the state becomes the later of the stored one and a full bucket at
-- NOW + pb, and it reports a query of that.
-- top, when set, is the most the stored level may hold (the token bucket's:
-- a settle's debt); else the capacity and the queue, limU.
STATE[2] = '<dd'
algs[2] = function(lvl, last, _, n, period, cap, cost, md, _, _, _, _, _, wd, pb, _, top)
  local now = NOW
  local capU = cap * period
  local limU = capU + md * n
  local admitU = limU
  if wd and wd > 0 then admitU = capU + wd * n end
  if not lvl then lvl, last = 0, 0 end
  if pb and pb > 0 then
    if lvl > limU then lvl = limU end
    local at = NOW + pb
    local t = at
    if last > t then t = last end
    local held, pushed = 0, 0
    if t - last < ceil(lvl / n) then held = lvl - (t - last) * n end
    if t - at < ceil(capU / n) then pushed = capU - (t - at) * n end
    if pushed > held then held = pushed end
    local allowed, rem, reset, retry, delay = algs[2](held, t, nil, n, period, cap, 0, md)
    return allowed, rem, reset, retry, delay, held, t, nil, reset
  end
  local need = cost * period
  if md > 0 and now < last then
    local off = last - now
    if lvl > limU then lvl = limU end
    local turn = lvl + need
    if turn < capU then turn = capU end
    turn = turn - capU + off * n
    local allowed, retry, delay, w1, w2, ttl = 0, 0, 0
    if turn <= admitU - capU or cost == 0 then
      allowed = 1
      lvl = lvl + need
      local over = lvl - capU
      if over < 0 then over = 0 end
      delay = ceil(over / n) + off
      if cost > 0 then w1, w2, ttl = lvl, last, ceil(lvl / n) + off end
    else
      retry = ceil((turn - (admitU - capU)) / n)
    end
    local rem, reset = 0, 0
    if capU > lvl then rem = floor((capU - lvl) / period) end
    if lvl > 0 then reset = ceil(lvl / n) + off end
    return allowed, rem, reset, retry, delay, w1, w2, nil, ttl
  end
  if now < last then now = last end
  local maxU = top or limU
  if lvl > maxU then lvl = maxU end
  local el = now - last
  if el >= ceil(lvl / n) then lvl = 0 else lvl = lvl - el * n end
  local allowed, retry, delay, w1, w2, ttl = 0, 0, 0
  if lvl + need <= admitU or cost == 0 then
    allowed = 1
    lvl = lvl + need
    if md > 0 and lvl > capU then delay = ceil((lvl - capU) / n) end
    if cost > 0 then w1, w2, ttl = lvl, now, ceil(lvl / n) end
  else
    retry = ceil((lvl + need - admitU) / n)
  end
  local rem = 0
  if capU > lvl then rem = floor((capU - lvl) / period) end
  return finish(now, allowed, rem, ceil(lvl / n), retry, delay, w1, w2, nil, ttl)
end
