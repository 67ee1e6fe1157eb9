-- Token bucket: the leaky bucket's meter (leaky_bucket.lua), its level
-- being the tokens missing from a full bucket, so a key never seen is full.
-- Its level may rise past the capacity, to bucket_owe, by a settle's debt.
-- See algo.leakyBucket.
STATE[1] = '<dd'
-- bucket_owe returns the most a settle lets a bucket (GCRA, token bucket)
-- of rate n per period ms and capacity cap owe, in 1/period units: at most
-- 2^51 and what the refill repays within algo.MaxHorizon (HORIZON ms), the
-- capacity plus a whole number of milliseconds of refill. See
-- algo.params.oweLimit; settle.lua uses it too.
local MAXOWE, HORIZON = 2251799813685248, 6307200000000
local function bucket_owe(n, period, cap)
  local capU, lim = cap * period, MAXOWE
  if n <= floor(MAXOWE / HORIZON) and HORIZON * n < lim then lim = HORIZON * n end
  return capU + floor((lim - capU) / n) * n
end
algs[1] = function(missing, last, _, n, period, cap, cost)
  return algs[2](missing, last, nil, n, period, cap, cost, 0, nil, nil, nil, nil, nil, 0, 0, nil, bucket_owe(n, period, cap))
end
