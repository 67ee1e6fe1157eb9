-- Token bucket: the leaky bucket's meter (leaky_bucket.lua), its level
-- being the tokens missing from a full bucket, so a key never seen is full.
-- See algo.leakyBucket.
STATE[1] = '<dd'
algs[1] = function(missing, last, _, n, period, cap, cost)
  return algs[2](missing, last, nil, n, period, cap, cost, 0)
end
