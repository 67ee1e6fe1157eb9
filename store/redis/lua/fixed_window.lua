-- Fixed window: state window, count. Windows are periods since the epoch,
-- or (cal 1) local days or (cal 2) local months, local being UTC + off ms,
-- with the civil-date arithmetic of algo.daysFromCivil / algo.civil.
-- See algo.fixedWindow.
local DAY = 86400000
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = m + 9
  if m > 2 then mp = m - 3 end
  local doy = floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
local function civil(days)
  local z = days + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local m = mp - 9
  if mp < 10 then m = mp + 3 end
  if m <= 2 then y = y + 1 end
  return y, m
end
local function window_of(now, period, cal, off)
  if cal == 1 then return floor((now + off) / DAY) end
  if cal == 2 then
    local y, m = civil(floor((now + off) / DAY))
    return y * 12 + m - 1
  end
  return floor(now / period)
end
local function window_bounds(w, period, cal, off)
  if cal == 1 then return w * DAY - off, (w + 1) * DAY - off end
  if cal == 2 then
    local y, m = floor(w / 12), w - floor(w / 12) * 12 + 1
    local ny, nm = y, m + 1
    if nm > 12 then ny, nm = y + 1, 1 end
    return days_from_civil(y, m, 1) * DAY - off, days_from_civil(ny, nm, 1) * DAY - off
  end
  return w * period, (w + 1) * period
end
STATE[3] = '<dd'
algs[3] = function(a, b, _, n, period, cap, cost, md, cal, off)
  local now = NOW
  local w = window_of(now, period, cal, off)
  if a and a > w then
    w = a
    now = window_bounds(w, period, cal, off)
  end
  local count = 0
  if a == w then count = b end
  local _, end_at = window_bounds(w, period, cal, off)
  local e = end_at - now
  local allowed, retry, ttl = 0, 0
  if count + cost <= n then
    allowed = 1
    count = count + cost
    if cost > 0 then ttl = e end
  else
    retry = e
  end
  local rem, reset = 0, 0
  if n > count then rem = n - count end
  if count > 0 then reset = e end
  if ttl then return finish(now, allowed, rem, reset, retry, 0, w, count, nil, ttl) end
  return finish(now, allowed, rem, reset, retry, 0)
end
