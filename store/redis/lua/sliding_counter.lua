-- Sliding-window counter: state window, current, previous; see algo.slidingCounter.
STATE[5] = '<ddd'
algs[5] = function(a, b, c, n, period, cap, cost)
  local now = NOW
  local w = floor(now / period)
  if a and a > w then w = a; now = a * period end
  local cur, prev = 0, 0
  if a == w then cur, prev = b, c elseif a == w - 1 then prev = b end
  local start = w * period
  if a == w and prev > 0 and cur <= n then
    -- written no earlier than the state fitted the capacity
    local emin = period - floor((n - cur) * period / prev)
    if now < start + emin then now = start + emin end
  end
  local carried = prev * (period - (now - start))
  local capU = n * period
  local allowed, retry, ttl = 0, 0
  if carried + (cur + cost) * period <= capU then
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
