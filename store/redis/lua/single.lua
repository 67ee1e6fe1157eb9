-- Entry point for one limit: KEYS[1]; ARGV[3..7]: rate n, period (ms),
-- capacity, cost, max delay (ms). The store appends "return decide(<algorithm>)".
local function decide(a)
  return algs[a](KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), true,
    tonumber(ARGV[7]))
end
