-- Sliding-window counter: state "window:current:previous"; see algo.slidingCounter.
algs[5] = function(key, n, period, cap, cost, write, md)
  local now = NOW
  local w = fdiv(now, period)
  local a, b, c
  local v = redis.call('GET', key)
  if v then
    a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
    a, b, c = tonumber(a), tonumber(b), tonumber(c)
  end
  if a and a > w then w = a; now = a * period end
  local cur, prev = 0, 0
  if a == w then cur, prev = b, c elseif a == w - 1 then prev = b end
  local start = w * period
  local carried = prev * (period - (now - start))
  local capU = n * period
  local allowed, retry = 0, 0
  if carried + (cur + cost) * period <= capU then
    allowed = 1
    cur = cur + cost
    if write and cost > 0 then
      redis.call('SET', key, string.format('%d:%d:%d', w, cur, prev), 'PX', px(now, start + 2 * period - now))
    end
  elseif n - cur - cost >= 0 then
    retry = start + period - fdiv((n - cur - cost) * period, prev) - now
  else
    retry = start + 2 * period - fdiv((n - cost) * period, cur) - now
  end
  local rem, reset = 0, 0
  local fit = fdiv(capU - carried, period) - cur
  if fit > 0 then rem = fit end
  if cur > 0 then reset = start + 2 * period - now elseif prev > 0 then reset = start + period - now end
  return finish(now, allowed, rem, reset, retry)
end
