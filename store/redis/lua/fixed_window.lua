-- Fixed window: state window, count. A window is a period since the
-- epoch (cal 0), named by its index, or a calendar day or month (cal 1,
-- 2), named by its end in ms. The caller passes the bounds b0 < b1 < b2 <
-- b3 of three consecutive calendar windows around its clock (see
-- algo.Limit.CalendarBounds); state.lua has checked that NOW lies within
-- them. See algo.fixedWindow.
STATE[3] = '<dd'
algs[3] = function(a, b, _, n, period, cap, cost, md, cal, b0, b1, b2, b3)
  local now = NOW
  local w, e
  if cal == 0 then
    w = floor(now / period)
    if a and a > w then w = a end
    e = (w + 1) * period
  else
    if now < b1 then e = b1 elseif now < b2 then e = b2 else e = b3 end
    if a and a > e then e = a end
    w = e
  end
  local count = 0
  if a == w then count = b end
  local allowed, retry, ttl = 0, 0
  if count + cost <= n or cost == 0 then -- a count above n is a settle's debt
    allowed = 1
    count = count + cost
    if cost > 0 then ttl = e - now end
  else
    retry = e - now
  end
  local rem, reset = 0, 0
  if n > count then rem = n - count end
  if count > 0 then reset = e - now end
  if ttl then return finish(now, allowed, rem, reset, retry, 0, w, count, nil, ttl) end
  return finish(now, allowed, rem, reset, retry, 0)
end
