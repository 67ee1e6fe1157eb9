-- Shared by every Tollgate script (prepended at load time).
-- KEYS[1]: the state key.
-- ARGV: rate n, period (ms), capacity, cost, now (ms, "" = Redis TIME),
--       ttl slack (ms, added to every TTL; tests with explicit times only).
-- Returns {allowed (0/1), remaining, reset_after_ms, retry_after_ms}.
-- All values are integers below 2^53, so double arithmetic is exact and
-- matches package algo bit for bit.
local key = KEYS[1]
local n = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local slack = tonumber(ARGV[6]) or 0
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local now0 = now
local floor = math.floor
-- fdiv is floor(a/b) for integers a >= 0, b > 0.
local function fdiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
-- cdiv is ceil(a/b) for integers a >= 0, b > 0.
local function cdiv(a, b) return fdiv(a + b - 1, b) end
-- pair reads "a:b" state; nil when absent or unreadable.
local function pair(v)
  if not v then return nil end
  local a, b = string.match(v, '^(%d+):(%d+)$')
  if not a then return nil end
  return tonumber(a), tonumber(b)
end
-- px is the TTL for state that is fresh again ms after the (possibly
-- clamped) decision time now, measured from the caller's time now0.
local function px(ms) return ms + (now - now0) + slack end
-- finish reports a decision made at now with durations from now0.
local function finish(allowed, rem, reset, retry)
  local off = now - now0
  if off > 0 then
    if reset > 0 then reset = reset + off end
    if allowed == 0 then retry = retry + off end
  end
  return {allowed, rem, reset, retry}
end
