-- Fixed window: state "window:count"; see algo.fixedWindow.
algs[3] = function(key, n, period, cap, cost, write, md)
  local now = NOW
  local w = fdiv(now, period)
  local a, b = pair(redis.call('GET', key))
  if a and a > w then w = a; now = a * period end
  local count = 0
  if a == w then count = b end
  local e = (w + 1) * period - now
  local allowed, retry = 0, 0
  if count + cost <= n then
    allowed = 1
    count = count + cost
    if write and cost > 0 then
      redis.call('SET', key, string.format('%d:%d', w, count), 'PX', px(now, e))
    end
  else
    retry = e
  end
  local rem, reset = 0, 0
  if n > count then rem = n - count end
  if count > 0 then reset = e end
  return finish(now, allowed, rem, reset, retry)
end
