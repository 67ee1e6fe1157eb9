-- Requests come packed in the call's third argument, REQ bytes each:
-- thirteen little-endian doubles, algorithm, rate n, period (ms), capacity,
-- cost, max delay (ms), calendar (0 none, 1 day, 2 month), for a
-- calendar window the bounds b0 < b1 < b2 < b3 (ms) of three consecutive
-- windows around the caller's clock (zeros otherwise), the request's
-- queue threshold wd (ms; 0: the max delay), and pb: when positive, the
-- request is a push back of its shaping limit's schedule by pb ms
-- (algo.PushBack), reported as a query; the call's key i is
-- request i's key. A call reads each key's state once
-- into the cache and writes each key it charged once, at the end (flush),
-- so requests on one key see each other's effect in order, exactly as
-- separate calls would.
-- The cache: slot[key] is the key's index j in the parallel arrays KEY,
-- S1, S2, S3, S4 (its state; S1[j] false when there is none, S4[j] a
-- sliding counter's D, false when 0), ALG (its
-- algorithm) and TTL (the TTL to write, false while nothing is charged);
-- the call has NK keys so far, and DIRTY[1..ND] are the charged ones'
-- indexes in order; FRESH[j] is true for a key prefetch found no string
-- under (absent, or of another type). Arrays rather than a table per key,
-- reused from call to call in a function library: nothing for Redis' Lua
-- to allocate and collect on each decision.
local REQS
local REQ = 104
local slot, KEY, S1, S2, S3, S4, ALG, TTL, DIRTY, FRESH = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local NK, ND = 0, 0
-- reset starts the requests of a call, begun: an empty cache.
local function reset()
  REQS = A[3]
  for j = 1, NK do slot[KEY[j]] = nil end
  NK, ND = 0, 0
end
local SIZE = { ['<dd'] = 16, ['<ddd'] = 24 }
-- whole is true for an integer in [0, 2^53): the only values state holds.
local function whole(x) return x >= 0 and x < 9007199254740992 and x == floor(x) end
-- parse returns the state stored as v in format f (nil when there is
-- none): two or three values, or nothing when v is absent or unreadable,
-- which reads as no state. A sliding counter ('<ddd') a settle wrote holds
-- a fourth, D (algo.State.D, the settle's time), returned fourth; one a
-- decision wrote holds three (D 0), as before settles existed.
local function parse(f, v)
  if not v then return end
  local x, y, z, d
  if #v == SIZE[f] then
    x, y, z = unpack_(f, v)
    if f == '<dd' then z = 0 end
  elseif f == '<ddd' and #v == 32 then
    x, y, z, d = unpack_('<dddd', v)
    if not whole(d) then return end
    if d == 0 then d = nil end
  else
    return
  end
  if whole(x) and whole(y) and whole(z) then
    if f == '<dd' then return x, y end
    return x, y, z, d
  end
end
-- read returns the state of key, of algorithm a, from its value v: what
-- parse reads, or for the '' a lone GCRA decision writes (decide.lua's
-- spaced) the debt the key's TTL holds, due at NOW plus that TTL. NOW
-- must be set.
local function read(key, a, v)
  if v == '' and a == 0 then
    local d = redis.call('PTTL', key)
    if d > 0 then return NOW + d, 0 end
    return
  end
  return parse(STATE[a], v)
end
-- load returns the cache index of key's state, read first if need be, or
-- nil and the error reply if it cannot be read (a key of another type).
local function load(key, a)
  local j = slot[key]
  if j then return j end
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return nil, v end
  NK = NK + 1
  j = NK
  local x, y, z, d = read(key, a, v)
  slot[key], KEY[j], S1[j], S2[j], S3[j], S4[j], ALG[j], TTL[j], FRESH[j] = j, key, x or false, y or false, z or false, d or false, a, false, false
  return j
end
-- prefetch reads the state of the keys of a call's k requests (but the
-- sliding log's) into the cache with one MGET, where load would read them
-- one GET at a time: one command instead of k, most of what a batch costs
-- Redis. Requests i with skip[i] are left out. MGET answers nothing for a key of another type, as for a missing
-- one; flush writes such a key with SET's GET option, which fails on a key
-- of another type and writes nothing, so the request still gets the
-- error.
local function prefetch(k, skip)
  local vals = redis.call('MGET', unpack(K, 1, k))
  for i = 1, k do
    local key = K[i]
    if not slot[key] and not (skip and skip[i]) then
      local a = unpack_('<d', REQS, i * REQ - REQ + 1)
      if a ~= 4 then
        NK = NK + 1
        local j, v = NK, vals[i]
        local x, y, z, d = read(key, a, v)
        slot[key], KEY[j], S1[j], S2[j], S3[j], S4[j], ALG[j], TTL[j], FRESH[j] = j, key, x or false, y or false, z or false, d or false, a, false, not v
      end
    end
  end
end
-- skewed returns the error of a request whose calendar windows [b0, b3)
-- do not hold NOW.
local function skewed(b0, b3)
  return 'ERR calendar window: time ' .. string.format('%d', NOW) .. ' ms is outside the windows ['
    .. string.format('%d', b0) .. ', ' .. string.format('%d', b3) .. ') passed with the request (clock skew of a day or more?)'
end
-- decide decides request i (at cost 0 if zero, at cost over if that is
-- set) and returns its five values, or false and the error reply; with
-- write it records the new state for flush.
local function decide(i, write, zero, over)
  local a, n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb = unpack_('<ddddddddddddd', REQS, i * REQ - REQ + 1)
  if zero then cost = 0 elseif over then cost = over end
  if cal > 0 and (NOW < b0 or NOW >= b3) then return false, skewed(b0, b3) end
  local key = K[i]
  if a == 4 then
    local ok, r1, r2, r3, r4, r5 = pcall(log, key, n, period, cost, write)
    if not ok then return false, r1 end
    return r1, r2, r3, r4, r5
  end
  local j, err = load(key, a)
  if not j then return false, err end
  local x = S1[j]
  local allowed, rem, reset, retry, delay, w1, w2, w3, ttl
  if x then
    allowed, rem, reset, retry, delay, w1, w2, w3, ttl = algs[a](x, S2[j], S3[j], n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb, S4[j])
  else
    allowed, rem, reset, retry, delay, w1, w2, w3, ttl = algs[a](nil, nil, nil, n, period, cap, cost, md, cal, b0, b1, b2, b3, wd, pb)
  end
  if write and w1 then
    if not TTL[j] then
      ND = ND + 1
      DIRTY[ND] = j
    end
    S1[j], S2[j], S3[j], S4[j], TTL[j] = w1, w2, w3 or false, false, ttl
  end
  return allowed, rem, reset, retry, delay
end
-- store stores state w1, w2, w3 (and a sliding counter's w4, D, when
-- positive: see parse) of algorithm a under key with a TTL of
-- ttl ms from NOW, checking first that the key holds no other type when
-- fresh; a failure (a key of another type) fails the call. save is store
-- in a pcall: it returns true, or false and the error. On Redis'
-- clock the expiry is given as an absolute time (PXAT), which Redis
-- propagates as it is; a relative one (PX) it rewrites into an absolute
-- one first.
local function store(key, a, w1, w2, w3, ttl, fresh, w4)
  local opt, at = 'PX', ttl + slack
  if REDIS_CLOCK then opt, at = 'PXAT', ttl + NOW end
  local v
  if w4 and w4 > 0 then v = pack('<dddd', w1, w2, w3, w4) else v = pack(STATE[a], w1, w2, w3) end
  if fresh then
    return redis.call('SET', key, v, opt, at, 'GET')
  end
  return redis.call('SET', key, v, opt, at)
end
local function save(key, a, w1, w2, w3, ttl, fresh)
  return pcall(store, key, a, w1, w2, w3, ttl, fresh)
end
-- flush writes every charged key's state with its TTL. It returns the
-- keys whose write failed, with the errors.
local function flush()
  local failed
  for d = 1, ND do
    local j = DIRTY[d]
    local ok, err = save(KEY[j], ALG[j], S1[j], S2[j], S3[j], TTL[j], FRESH[j])
    if not ok then
      failed = failed or {}
      failed[KEY[j]] = err
    end
  end
  return failed
end
-- errmsg returns the text of a Lua or Redis error.
local function errmsg(e)
  if type(e) == 'table' and e.err then return e.err end
  return tostring(e)
end
-- The reply. An entry point puts request i's five values in OUT[5i-4 ..
-- 5i] (reused from call to call, like the cache) and answers with answer:
-- one string of the 5k values as little-endian doubles or, when some
-- requests failed, an array of that string and each failed request's
-- index and error text. A string costs Redis (and the client) far less
-- than an array. FMT[n] is the
-- struct format of n doubles.
local OUT, FMT = {}, {}
-- answer returns the reply for k requests; errs, when set, maps the index
-- of each failed request to its error.
local function answer(k, errs)
  local n = 5 * k
  local f = FMT[n]
  if not f then
    f = '<' .. string.rep('d', n)
    FMT[n] = f
  end
  local packed = pack(f, unpack(OUT, 1, n))
  if not errs then return packed end
  local r = {packed}
  for i = 1, k do
    if errs[i] then
      r[#r + 1] = i
      r[#r + 1] = errmsg(errs[i])
    end
  end
  return r
end
