-- Entry point for several limits decided all or nothing: KEYS[i] is limit
-- i's key (all in one hash slot); ARGV[3] is the count k; then for each
-- limit eight values: algorithm, rate n, period (ms), capacity, cost, max
-- delay (ms), calendar, zone offset (ms). Every limit is first decided without writing. If all allow,
-- all are written; if any refuses, nothing is, and the limits that would
-- have allowed report their state as it is (decided at cost 0).
-- Returns the k results flattened, 5 values each.
local k = tonumber(ARGV[3])
local W = 8
local function run(i, cost, write)
  local b = 3 + (i - 1) * W
  return algs[tonumber(ARGV[b + 1])](KEYS[i], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]),
    tonumber(ARGV[b + 4]), cost, write, tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8]))
end
local function cost(i) return tonumber(ARGV[3 + (i - 1) * W + 5]) end
local res, all = {}, true
for i = 1, k do
  res[i] = run(i, cost(i), false)
  if res[i][1] == 0 then all = false end
end
for i = 1, k do
  if all then
    res[i] = run(i, cost(i), true)
  elseif res[i][1] == 1 then
    res[i] = run(i, 0, false)
  end
end
local out = {}
for i = 1, k do
  for j = 1, 5 do out[(i - 1) * 5 + j] = res[i][j] end
end
return out
