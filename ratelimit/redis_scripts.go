package ratelimit

import "github.com/redis/go-redis/v9"

// The Redis backend keeps one key per limit, all of a tenant's keys under
// one hash tag ({prefix:tenant}) so that a request's keys share a Redis
// Cluster slot and one script can touch them all:
//
//	{goodput:acme}:r              tenant requests (GCRA theoretical arrival time, µs)
//	{goodput:acme}:t              tenant tokens   (idem)
//	{goodput:acme}:c              tenant concurrency (sorted set: lease id -> expiry, µs)
//	{goodput:acme}:k:<key id>:r   per-key limits (same three suffixes)
//	{goodput:acme}:m:<model>:t    per-model limits (idem), under the configured
//	                              model's name whichever name a request gives it
//	{goodput:_probe}:r            written by the recovery probe (see probeWrite), expires in 1s
//
// GCRA: a limit of N units per minute has an emission interval T = 60s/N and a
// tolerance tau = capacity*T. A cost c at time now moves the key's theoretical
// arrival time tat to max(tat, now) + c*T, and is admitted when that is at most
// now + tau. A key that is missing or in the past means a full bucket, so keys
// expire once their bucket is full again. Times are microseconds, on the Redis
// server's clock (TIME) unless the client passes its own. Numbers travel as
// strings: Lua would truncate fractional replies to integers and print large
// numbers with 14 significant digits.

// luaNow starts every script: it allows the scripts' writes to replicate
// as effects (they read TIME, which is not deterministic), and sets `now`, in
// µs, from ARGV[1] (client time, for tests that drive time) or else from the
// server's clock.
const luaNow = `if redis.replicate_commands then redis.replicate_commands() end
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// admitScript decides a request against every limit that applies to it, and
// charges them all only if all admit it (a rejection writes nothing).
//
// KEYS[i]: one key per limit.
// ARGV[1]: now in µs, or "" for the server clock; ARGV[2]: lease id;
// ARGV[3]: lease lifetime in µs; ARGV[4]: estimated tokens; ARGV[5]: the
// time, in µs on the script's clock, after which the caller no longer
// waits for the answer, or "" for none: a call run later (a Redis that
// stalled, a slow network) decides nothing and writes nothing, since the
// gateway has given up on it and would never release what it took.
// Then three ARGV per key: kind, p1, p2 where kind is
//
//	"r" (requests, cost 1) or "t" (tokens, cost ARGV[4]): p1 = T in µs, p2 = capacity in units;
//	"c" (concurrency): p1 = maximum in flight, p2 unused.
//
// Reply: {allowed (1|0), then four strings per key: code ("0" admits, "1" over
// the limit, "2" larger than the capacity), remaining units, µs until full
// (0 for "c"), µs to wait (rate kinds, when code is "1"), then now (µs, the
// script's clock)}. Remaining and reset describe the state after the charge
// when allowed, before it otherwise. A call run after ARGV[5] replies
// {-1, now}.
var admitScript = redis.NewScript(luaNow + `
local lease = ARGV[2]
local ttl = tonumber(ARGV[3])
local est = tonumber(ARGV[4])
local nowstr = string.format('%.0f', now)
if ARGV[5] ~= '' and now > tonumber(ARGV[5]) then return {-1, nowstr} end
local n = #KEYS
local ok = 1
local kind, p1, p2, cost, cur, nxt = {}, {}, {}, {}, {}, {}
for i = 1, n do
  local a = 5 + (i - 1) * 3
  kind[i] = ARGV[a + 1]
  p1[i] = tonumber(ARGV[a + 2])
  p2[i] = tonumber(ARGV[a + 3])
  if kind[i] == 'c' then
    cur[i] = redis.call('ZCOUNT', KEYS[i], '(' .. nowstr, '+inf')
    if cur[i] >= p1[i] then ok = 0 end
  else
    if kind[i] == 'r' then cost[i] = 1 else cost[i] = est end
    local tat = now
    local v = redis.call('GET', KEYS[i])
    if v then
      tat = tonumber(v)
      if tat < now then tat = now end
    end
    cur[i] = tat
    nxt[i] = tat + cost[i] * p1[i]
    -- 1 µs of slack absorbs the rounding of absolute times in doubles
    if cost[i] > p2[i] or nxt[i] - now > p2[i] * p1[i] + 1 then ok = 0 end
  end
end
local out = {ok}
for i = 1, n do
  if kind[i] == 'c' then
    local code = '0'
    if cur[i] >= p1[i] then code = '1' end
    local rem = p1[i] - cur[i] - ok
    if rem < 0 then rem = 0 end
    out[#out + 1] = code
    out[#out + 1] = string.format('%.0f', rem)
    out[#out + 1] = '0'
    out[#out + 1] = '0'
  else
    local T, cap = p1[i], p2[i]
    local tau = cap * T
    local code, retry = '0', 0
    if cost[i] > cap then
      code = '2'
    elseif nxt[i] - now > tau + 1 then
      code = '1'
      retry = nxt[i] - now - tau
    end
    local level = cur[i]
    if ok == 1 then level = nxt[i] end
    local used = level - now
    local rem = math.floor((tau - used) / T + 1e-6)
    if rem < 0 then rem = 0 end
    out[#out + 1] = code
    out[#out + 1] = string.format('%.0f', rem)
    out[#out + 1] = string.format('%.0f', math.ceil(used))
    out[#out + 1] = string.format('%.0f', math.ceil(retry))
  end
end
if ok == 1 then
  for i = 1, n do
    if kind[i] == 'c' then
      redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', nowstr)
      redis.call('ZADD', KEYS[i], string.format('%.0f', now + ttl), lease)
      redis.call('PEXPIRE', KEYS[i], string.format('%.0f', math.ceil(ttl / 1000) + 1000))
    elseif cost[i] > 0 then
      redis.call('SET', KEYS[i], string.format('%.2f', nxt[i]), 'PX',
        string.format('%.0f', math.ceil((nxt[i] - now) / 1000) + 1000))
    end
  end
end
out[#out + 1] = nowstr
return out
`)

// reconcileScript corrects a token charge and releases a lease.
//
// KEYS[i]: the token keys charged at admission and the concurrency keys.
// ARGV[1]: now in µs or ""; ARGV[2]: lease id; ARGV[3]: tokens to charge
// (actual - estimate; negative refunds). Then three ARGV per key: kind ("t"
// or "c"), T in µs, capacity in units. A charge may put a bucket in debt (up to
// 60 times its capacity); a refund never fills it above its capacity.
var reconcileScript = redis.NewScript(luaNow + `
local lease = ARGV[2]
local delta = tonumber(ARGV[3])
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 3
  local kind = ARGV[a + 1]
  if kind == 'c' then
    redis.call('ZREM', KEYS[i], lease)
  elseif delta ~= 0 then
    local T = tonumber(ARGV[a + 2])
    local cap = tonumber(ARGV[a + 3])
    local d = delta
    if d > cap * 60 then d = cap * 60 end
    local tat = now
    local v = redis.call('GET', KEYS[i])
    if v then
      tat = tonumber(v)
      if tat < now then tat = now end
    end
    local nxt = tat + d * T
    if nxt > now then
      redis.call('SET', KEYS[i], string.format('%.2f', nxt), 'PX',
        string.format('%.0f', math.ceil((nxt - now) / 1000) + 1000))
    else
      redis.call('DEL', KEYS[i])
    end
  end
end
return 1
`)

// extendScript charges a stream that runs past what it was charged.
//
// KEYS[i]: the token keys charged at admission. ARGV[1]: now in µs or "";
// ARGV[2]: tokens to charge; ARGV[3]: "charge" (charge them, into debt if
// need be, up to 60 times the capacity as Reconcile does) or "cut" (charge
// them only if every key has them, else nothing); ARGV[4]: the time after
// which the caller no longer waits, or "" (as for admitScript: a charge run
// later, which the gateway counted as not made, would be charged twice).
// Then two ARGV per key: T in µs and capacity in units. Reply: 1 charged, 0
// refused (cut only), -1 run too late (nothing charged).
var extendScript = redis.NewScript(luaNow + `
if ARGV[4] ~= '' and now > tonumber(ARGV[4]) then return -1 end
local n = tonumber(ARGV[2])
local cut = ARGV[3] == 'cut'
local nxt = {}
for i = 1, #KEYS do
  local T = tonumber(ARGV[3 + 2 * i])
  local cap = tonumber(ARGV[4 + 2 * i])
  local d = n
  if d > cap * 60 then d = cap * 60 end
  local tat = now
  local v = redis.call('GET', KEYS[i])
  if v then
    tat = tonumber(v)
    if tat < now then tat = now end
  end
  nxt[i] = tat + d * T
  if cut and nxt[i] - now > cap * T + 1 then return 0 end
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], string.format('%.2f', nxt[i]), 'PX',
    string.format('%.0f', math.ceil((nxt[i] - now) / 1000) + 1000))
end
return 1
`)

// leaseScript is a replica's heartbeat: it renews the leases of its live
// requests and releases leases that may have outlived their request.
//
// KEYS[i]: a concurrency key; ARGV[1]: now in µs or ""; ARGV[2]: lease
// lifetime in µs; ARGV[3]: the time after which the caller no longer waits,
// or "" (as for admitScript: a renewal run later could bring back a lease
// its request's end released meanwhile, on another connection); ARGV[2+2i]:
// "+" (renew, creating it again if it expired and was swept) or "-"
// (release); ARGV[3+2i]: the lease id in KEYS[i]. Reply: 1, or -1 run too
// late (nothing done: the releases are sent again).
var leaseScript = redis.NewScript(luaNow + `
if ARGV[3] ~= '' and now > tonumber(ARGV[3]) then return -1 end
local ttl = tonumber(ARGV[2])
local score = string.format('%.0f', now + ttl)
local px = string.format('%.0f', math.ceil(ttl / 1000) + 1000)
for i = 1, #KEYS do
  if ARGV[2 + 2 * i] == '+' then
    redis.call('ZADD', KEYS[i], score, ARGV[3 + 2 * i])
    redis.call('PEXPIRE', KEYS[i], px)
  else
    redis.call('ZREM', KEYS[i], ARGV[3 + 2 * i])
  end
end
return 1
`)
