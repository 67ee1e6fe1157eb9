-- Entry point for one limit: KEYS[1]; ARGV[3..9]: rate n, period (ms),
-- capacity, cost, max delay (ms), calendar (0 none, 1 day, 2 month), zone
-- offset (ms). The store appends "return decide(<algorithm>)".
local function decide(a)
  return algs[a](KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), true,
    tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]))
end
