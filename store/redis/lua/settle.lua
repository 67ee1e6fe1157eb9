-- Entry point for settling a reservation (algo.Settlement): KEYS[1..k]
-- its items' states, KEYS[k+1] its marker, all in the group's slot; A[3]
-- the items' requests packed as for decide.lua, their cost the estimate;
-- A[4] the reservation's age (ms): it was made at NOW less that; A[5] how
-- long the marker is kept (ms), 0 for a reservation past its TTL; A[6]
-- the items' actual costs, k little-endian doubles.
--
-- settle_all reads every item's state first, so that a key of another
-- type (or a calendar window that does not hold NOW) fails the call
-- before anything is written: it answers {i, error} for item i. It then
-- sets the marker, unless it exists (the reservation was settled
-- already: outcome 1, nothing changes) or A[5] is 0 (expired: outcome 2,
-- nothing is written); settles each item at NOW as algo.Prepared.Settle
-- does (a repeated or expired one at its estimate, which changes nothing
-- and tells its debt); and writes each state a settle changed, with the
-- TTL a query of it reports (its ResetAfter; 0: the state is as none, and
-- the key is deleted). It answers one string of 1 + 6k little-endian
-- doubles: the outcome (0 applied), then for each item a query's five
-- values (as answer's) after the settle and its debt (algo.Result.Debt).
--
-- settles[a](s1, s2, s3, s4, n, period, cap, estimate, actual,
-- reserved_at, cal, b0, b1, b2, b3) settles under algorithm a from its
-- state (zeros: none, as algo's zero State) and returns the debt, then the
-- state to store w1, w2, w3, w4 (w1 nil: unchanged). See algo's settle.go,
-- which every function here mirrors.
local settles = {}
-- round_debt is algo.roundDebt: a debt d (1/period units) past the
-- capacity capU rounded up to a whole millisecond of refill.
local function round_debt(capU, n, d)
  if d > capU then return capU + ceil((d - capU) / n) * n end
  return d
end
-- settle_bucket is algo.settleBucket: what a bucket owing d owes after a
-- settle elapsed ms after its reservation.
local function settle_bucket(n, period, capU, owe, d, elapsed, est, act)
  if act < est then
    local give = (est - act) * period
    if elapsed >= ceil(give / n) then return d end -- the refill replaced it already
    if elapsed > 0 then give = give - elapsed * n end
    local nd = d - give
    if nd < 0 then nd = 0 end
    nd = round_debt(capU, n, nd)
    if nd > d then nd = d end
    return nd
  elseif act > est then
    if act - est <= floor((owe - d) / period) then
      local nd = round_debt(capU, n, d + (act - est) * period)
      if nd > owe then nd = owe end
      return nd
    end
    return owe
  end
  return d
end
-- bucket_debt is algo.bucketDebt: the whole units past the capacity.
local function bucket_debt(capU, period, d)
  if d > capU then return ceil((d - capU) / period) end
  return 0
end
-- add_capped is algo.addCapped: a + b, at most lim.
local function add_capped(a, b, lim)
  if b > lim - a then
    if a > lim then return a end
    return lim
  end
  return a + b
end
-- GCRA: algo.settleGCRA.
settles[0] = function(a, b, _, _, n, period, cap, est, act, at)
  local now, capU, owe = NOW, cap * period, bucket_owe(n, period, cap)
  local lo = a - floor((owe - b) / n)
  if now < lo then now = lo end -- written no earlier than when it owed owe
  local d = 0
  if a > now or (a == now and b > 0) then d = (a - now) * n + b end
  local nd = settle_bucket(n, period, capU, owe, d, now - at, est, act)
  if nd == d then return bucket_debt(capU, period, nd) end
  local q = floor(nd / n)
  return bucket_debt(capU, period, nd), now + q, nd - q * n
end
-- Token bucket: algo.settleTokenBucket.
settles[1] = function(lvl, last, _, _, n, period, cap, est, act, at)
  local capU, owe = cap * period, bucket_owe(n, period, cap)
  if lvl > owe then lvl = owe end
  local now = NOW
  if now < last then now = last end
  if now - last >= ceil(lvl / n) then lvl = 0 else lvl = lvl - (now - last) * n end
  local nd = settle_bucket(n, period, capU, owe, lvl, now - at, est, act)
  if nd == lvl then return bucket_debt(capU, period, nd) end
  return bucket_debt(capU, period, nd), nd, now
end
-- Fixed window: algo.settleFixedWindow. A calendar window is named by its
-- end among the bounds passed with the request; a reservation outside
-- them is of no window the state counts, and gets no refund.
settles[3] = function(a, b, _, _, n, period, _, est, act, at, cal, b0, b1, b2, b3)
  local w, wr
  if cal == 0 then
    w, wr = floor(NOW / period), floor(at / period)
  else
    if NOW < b1 then w = b1 elseif NOW < b2 then w = b2 else w = b3 end
    if at >= b0 and at < b1 then wr = b1 elseif at >= b1 and at < b2 then wr = b2 elseif at >= b2 and at < b3 then wr = b3 end
  end
  if a > w then w = a end
  local count = 0
  if a == w then count = b end
  local nc = count
  if act < est and wr == w then
    if est - act < count then nc = count - (est - act) else nc = 0 end
  elseif act > est then
    nc = add_capped(count, act - est, MAXOWE)
  end
  local debt = 0
  if nc > n then debt = nc - n end
  if nc == count then return debt end
  return debt, w, nc
end
-- Sliding counter: algo.settleSlidingCounter, which records in D the time
-- it wrote the state.
settles[5] = function(a, b, c, d, n, period, _, est, act, at)
  local w, _, now, cur, prev = sliding_view(a, b, c, d, n, period, NOW)
  local wr = floor(at / period)
  local nc, np = cur, prev
  if act < est and wr == w then
    if est - act < cur then nc = cur - (est - act) else nc = 0 end
  elseif act < est and wr == w - 1 then
    if est - act < prev then np = prev - (est - act) else np = 0 end
  elseif act > est then
    nc = add_capped(cur, act - est, floor(MAXOWE / period))
  end
  local changed = nc ~= cur or np ~= prev
  if changed then a, b, c, d = w, nc, np, now end
  local _, start, t, cur2, prev2 = sliding_view(a, b, c, d, n, period, NOW)
  local over = prev2 * (period - (t - start)) + cur2 * period - n * period
  local debt = 0
  if over > 0 then debt = ceil(over / period) end
  if not changed then return debt end
  return debt, w, nc, np, now
end
-- settle_all settles the reservation (see above).
local function settle_all()
  tick()
  local k = #REQS / REQ
  local at, life, acts = NOW - tonumber(A[4]), tonumber(A[5]), A[6]
  for i = 1, k do
    local a, _, _, _, _, _, cal, b0, _, _, b3 = unpack_('<ddddddddddd', REQS, i * REQ - REQ + 1)
    if not settles[a] then return {i, 'ERR the algorithm cannot settle'} end
    if cal > 0 and (NOW < b0 or NOW >= b3) then return {i, skewed(b0, b3)} end
    local j, err = load(K[i], a)
    if not j then return {i, errmsg(err)} end
  end
  local outcome = 2
  if life > 0 then
    local opt, exp = 'PX', life + slack
    if REDIS_CLOCK then opt, exp = 'PXAT', NOW + life end
    outcome = 1
    if redis.call('SET', K[k + 1], '1', 'NX', opt, exp) then outcome = 0 end
  end
  OUT[1] = outcome
  for i = 1, k do
    local a, n, period, cap, est, md, cal, b0, b1, b2, b3 = unpack_('<ddddddddddd', REQS, i * REQ - REQ + 1)
    local act = est
    if outcome == 0 then act = unpack_('<d', acts, i * 8 - 7) end
    local j = slot[K[i]]
    local x, y, z, d = S1[j], S2[j], S3[j], S4[j]
    local debt, w1, w2, w3, w4 = settles[a](x or 0, y or 0, z or 0, d or 0, n, period, cap, est, act, at, cal, b0, b1, b2, b3)
    if w1 then x, y, z, d = w1, w2, w3, w4 end
    local allowed, rem, reset, retry, delay = algs[a](x, y, z, n, period, cap, 0, md, cal, b0, b1, b2, b3, 0, 0, d)
    if w1 then
      if reset > 0 then store(K[i], a, w1, w2, w3, reset, false, w4) else redis.call('DEL', K[i]) end
    end
    local o = i * 6 - 4
    OUT[o], OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4], OUT[o + 5] = allowed, rem, reset, retry, delay, debt
  end
  local m = 1 + 6 * k
  local f = FMT[m]
  if not f then
    f = '<' .. string.rep('d', m)
    FMT[m] = f
  end
  return pack(f, unpack(OUT, 1, m))
end
-- settle_many is the entry point for n reservations settled together
-- (coalesced: on Redis' clock, on Redis Cluster all in one hash slot):
-- KEYS each one's keys as settle_all takes them, one after another; A[3]
-- their items' requests, one after another; A[4] for each three
-- little-endian doubles: its items' count, its age and its marker's life
-- (settle_all's A[4] and A[5]); A[5] their items' actual costs, one after
-- another. Each is settled in turn by settle_all, at one NOW, as separate
-- calls made in the same millisecond would settle them, and each on its
-- own: one that fails (a key of another type) gets its error and leaves
-- the others standing. It answers an array of n replies: each what
-- settle_all answers for that reservation, or its error.
local function settle_many()
  local keys, args = K, A
  local r, ki, ri, ai = {}, 0, 0, 0
  for j = 1, #args[4] / 24 do
    local k, age, life = unpack_('<ddd', args[4], j * 24 - 23)
    local sub = {}
    for i = 1, k + 1 do sub[i] = keys[ki + i] end
    K, A = sub, {args[1], args[2], string.sub(args[3], ri + 1, ri + k * REQ), age, life, string.sub(args[5], ai + 1, ai + k * 8)}
    ki, ri, ai = ki + k + 1, ri + k * REQ, ai + k * 8
    reset()
    local ok, res = pcall(settle_all)
    if ok then r[j] = res else r[j] = {err = errmsg(res)} end
  end
  return r
end
