-- Entry point for k independent single-limit decisions coalesced into one
-- call: KEYS[i] is request i's key (on Redis Cluster all in one hash slot);
-- ARGV[3] is the count k; then for each request the eight values multi.lua
-- takes: algorithm, rate n, period (ms), capacity, cost, max delay (ms),
-- calendar, zone offset (ms). The requests are decided in order, each
-- written at once, so a request sees the effect of the ones before it on
-- the same key exactly as after separate calls made in the same
-- millisecond. They are not all or nothing: a request that fails (say,
-- WRONGTYPE on a key written by something else) yields an error reply in
-- its first slot and leaves the others' decisions standing.
-- Returns the k results flattened, 5 values each.
local k = tonumber(ARGV[3])
local W = 8
local out = {}
for i = 1, k do
  local b = 3 + (i - 1) * W
  local ok, r = pcall(algs[tonumber(ARGV[b + 1])], KEYS[i], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]),
    tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), true, tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7]),
    tonumber(ARGV[b + 8]))
  local o = (i - 1) * 5
  if ok then
    for j = 1, 5 do out[o + j] = r[j] end
  else
    if type(r) == 'table' and r.err then r = r.err end
    out[o + 1] = redis.error_reply(tostring(r))
    for j = 2, 5 do out[o + j] = 0 end
  end
end
return out
