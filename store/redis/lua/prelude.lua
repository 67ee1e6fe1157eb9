-- Shared by every Tollgate script (prepended at load time).
-- ARGV[1]: now in ms ("" = Redis TIME); ARGV[2]: ttl slack in ms (added to
-- every TTL; only for tests that pass explicit times). The rest of ARGV
-- and KEYS belong to the entry point (decide.lua, multi.lua, ...).
-- All values are integers below 2^53, so double arithmetic is exact and
-- matches package algo bit for bit.
local NOW = tonumber(ARGV[1])
local slack = tonumber(ARGV[2]) or 0
local REDIS_CLOCK = not NOW -- NOW is Redis' own time: expiries can be absolute
if not NOW then
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local floor, ceil = math.floor, math.ceil
local pack, unpack_ = struct.pack, struct.unpack
-- floor(a / b) and ceil(a / b) are exact for integers with |a| + b <= 2^53
-- and b > 0: a quotient that is not an integer lies at least 1/b from the
-- nearest one, more than half the spacing of doubles there (|a/b| 2^-53),
-- so the correctly rounded division cannot land on the integer; the
-- scripts keep every value below 2^50.
-- Algorithms. Every one but the sliding log (see log below) is a pure
-- function algs[<algo.Algorithm>](s1, s2, s3, n, period, cap, cost, md,
-- cal, off) of its stored state (s1 nil when there is none) that returns
-- allowed (0/1), remaining, reset_after_ms, retry_after_ms, delay_ms, then
-- the state to store w1, w2, w3 (w1 nil: store nothing) and its TTL in ms
-- from NOW. STATE[a] is the struct format the state is stored in: two or
-- three little-endian doubles.
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
