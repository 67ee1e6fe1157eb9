-- Sliding-window counter: state window, current, previous, and for a
-- state a settle wrote, the time it did (d, algo.State.D); see
-- algo.slidingCounter.
STATE[5] = '<ddd'
-- sliding_view returns what a counter with state a, b, c, d (zeros: none)
-- decides by at now: the window w and its start, the time it decides as of
-- (now, or later for a clock that stepped back) and the counts of w and of
-- the window before it. See algo.slidingView.
local function sliding_view(a, b, c, d, n, period, now)
  local w = floor(now / period)
  if a > w then w = a; now = a * period end
  local cur, prev = 0, 0
  if a == w then cur, prev = b, c elseif a == w - 1 then prev = b end
  local start = w * period
  if a == w and d > 0 then
    if now < d then now = d end -- written by a settle at d
  elseif a == w and prev > 0 and cur <= n then
    -- written no earlier than the state fitted the capacity
    local emin = period - floor((n - cur) * period / prev)
    if now < start + emin then now = start + emin end
  end
  return w, start, now, cur, prev
end
algs[5] = function(a, b, c, n, period, cap, cost, _, _, _, _, _, _, _, _, d)
  local w, start, now, cur, prev = sliding_view(a or 0, b or 0, c or 0, d or 0, n, period, NOW)
  local carried = prev * (period - (now - start))
  local capU = n * period
  local allowed, retry, ttl = 0, 0
  if carried + (cur + cost) * period <= capU or cost == 0 then -- above capU: a settle's debt
    allowed = 1
    cur = cur + cost
    if cost > 0 then ttl = start + 2 * period - now end
  elseif n - cur - cost >= 0 then
    retry = start + period - floor((n - cur - cost) * period / prev) - now
  else
    retry = start + 2 * period - floor((n - cost) * period / cur) - now
  end
  local rem, reset = 0, 0
  local fit = floor((capU - carried) / period) - cur
  if fit > 0 then rem = fit end
  if cur > 0 then reset = start + 2 * period - now elseif prev > 0 then reset = start + period - now end
  if ttl then return finish(now, allowed, rem, reset, retry, 0, w, cur, prev, ttl) end
  return finish(now, allowed, rem, reset, retry, 0)
end
