-- Shared by every Tollgate script (prepended at load time).
-- ARGV[1]: now in ms ("" = Redis TIME); ARGV[2]: ttl slack in ms (added to
-- every TTL; only for tests that pass explicit times). The rest of ARGV
-- and KEYS belong to the entry point (single.lua or multi.lua).
-- Every algorithm is a function algs[<algo.Algorithm>](key, n, period,
-- cap, cost, write, max_delay_ms) returning {allowed (0/1), remaining,
-- reset_after_ms, retry_after_ms, delay_ms}; with write false it changes
-- nothing. All values are
-- integers below 2^53, so double arithmetic is exact and matches package
-- algo bit for bit.
local NOW = tonumber(ARGV[1])
local slack = tonumber(ARGV[2]) or 0
if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local floor = math.floor
local algs = {}
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
-- clamped) decision time now, measured from the caller's time NOW.
local function px(now, ms) return ms + (now - NOW) + slack end
-- finish reports a decision made at now with durations from NOW.
local function finish(now, allowed, rem, reset, retry, delay)
  local off = now - NOW
  if off > 0 then
    if reset > 0 then reset = reset + off end
    if allowed == 0 then retry = retry + off end
  end
  return {allowed, rem, reset, retry, delay or 0}
end
