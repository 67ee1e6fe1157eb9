-- Shared by every Tollgate script (prepended at load time). Everything
-- here and in the algorithms' files is definitions: the per-call state
-- is set by begin (and state.lua's reset), so the same code runs as a
-- script (EVALSHA: definitions made anew on each call) or as a function
-- library (FCALL: made once, when the library is loaded).
-- All values are integers below 2^53, so double arithmetic is exact and
-- matches package algo bit for bit.
-- floor, ceil, pack and unpack_ are set by the first init (which begin
-- calls): a function library may not touch math or struct while it loads.
local floor, ceil, pack, unpack_
-- The call: K its keys, A its arguments; NOW its time in ms; slack added
-- to every TTL (only for tests that pass explicit times); REDIS_CLOCK true
-- when NOW is Redis' own time, so expiries can be absolute.
local K, A, NOW, slack, REDIS_CLOCK
-- tick sets NOW to Redis' TIME on a call on Redis' clock that has not
-- read it yet.
local function tick()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  end
end
-- begin starts a call with keys k and arguments a. a[1] is now in ms (""
-- = Redis TIME), a[2] the TTL slack in ms; the rest of a, and k, belong to
-- the entry point (decide.lua, multi.lua, ...). With lazy, a call on
-- Redis' clock leaves NOW unset until the entry point calls tick: a lone
-- decision may need no TIME at all (decide.lua's spaced).
local function init()
  if not floor then
    floor, ceil = math.floor, math.ceil
    pack, unpack_ = struct.pack, struct.unpack
  end
end
local function begin(k, a, lazy)
  init()
  K, A = k, a
  NOW = tonumber(a[1])
  slack = tonumber(a[2]) or 0
  REDIS_CLOCK = not NOW
  if not lazy then tick() end
end
-- floor(a / b) and ceil(a / b) are exact for integers with |a| + b <= 2^53
-- and b > 0: a quotient that is not an integer lies at least 1/b from the
-- nearest one, more than half the spacing of doubles there (|a/b| 2^-53),
-- so the correctly rounded division cannot land on the integer; the
-- scripts keep every value below 2^50, but a settle's debt (at most 2^51,
-- algo.maxOweUnits) and sums with it, which stay below 2^53.
-- Algorithms. Every one but the sliding log (see log below) is a pure
-- function algs[<algo.Algorithm>](s1, s2, s3, n, period, cap, cost, md,
-- cal, b0, b1, b2, b3, wd, pb, s4) of its stored state (s1 nil when there
-- is none; s4 only a sliding counter's: algo.State.D, false for 0) that returns
-- allowed (0/1), remaining, reset_after_ms, retry_after_ms, delay_ms, then
-- the state to store w1, w2, w3 (w1 nil: store nothing) and its TTL in ms
-- from NOW. A decision never writes s4 (algo: a decision that charges
-- leaves D 0). STATE[a] is the struct format the state is stored in: two or
-- three little-endian doubles (a sliding counter a settle wrote: four, D
-- the fourth, see state.lua's parse).
local algs, STATE = {}, {}
-- log is the sliding log (sliding_log.lua), which reads and writes Redis
-- itself; nil in a script built without it.
local log
-- finish reports a decision made at now (clamped forward from NOW by the
-- state) with durations from NOW, and the state to write.
local function finish(now, allowed, rem, reset, retry, delay, w1, w2, w3, ttl)
  local off = now - NOW
  if off > 0 then
    if reset > 0 then reset = reset + off end
    if allowed == 0 then retry = retry + off end
  end
  if ttl then ttl = ttl + off end
  return allowed, rem, reset, retry, delay, w1, w2, w3, ttl
end
