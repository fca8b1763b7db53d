-- Check-all-then-commit over every bucket of one request (see bucket.go;
-- this must stay equivalent to eval there).
-- KEYS[i]: bucket keys, all in one hash slot (on a Cluster, Redis refuses
--   anything else).
-- ARGV[1]: now in ms, or "" to use Redis TIME (the production path).
-- ARGV[2]: "1" when the caller may have to give this commit back
--   (refund.lua: a request whose keys span several slots is committed slot
--   by slot): the reply then ends with now and each key's reset before.
-- ARGV[3+7(i-1) ..]: kind ("t" token bucket | "f" fixed window | "s" sliding
--   window counter), limit,
--   capacity, window ms, cost, veto ("1" = a denial blocks the commit),
--   lease (extra tokens to take on commit, as many as are left, at most this).
-- Returns {committed, then per key: allowed, remaining, retry ms, reset ms,
--   leased}, then when ARGV[2] is "1": now ms, and per key the reset ms from
--   before this call.
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ceildiv(a, b)
  local q = math.floor(a / b)
  if q * b < a then q = q + 1 end
  return q
end

-- fdiv is floor(a / b) for non-negative integers, exact even where the
-- float quotient rounds up to the next integer.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- slidingReset is when a sliding window's estimate reaches zero (bucket.go).
local function slidingReset(cur, prev, e, win)
  if cur > 0 then return 2 * win - e elseif prev > 0 then return win - e end
  return 0
end

local n = #KEYS
local st = {}
local commit = true
for i = 1, n do
  local o = 3 + (i - 1) * 7
  local kind, limit, cap, win, cost = ARGV[o], tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4])
  local veto = ARGV[o + 5] == '1'
  local lease = tonumber(ARGV[o + 6])
  local r = { kind = kind, limit = limit, win = win, lease = lease }
  if kind == 'f' then
    local w = math.floor(now / win)
    local s = redis.call('HMGET', KEYS[i], 'w', 'c')
    local c = 0
    if tonumber(s[1]) == w then c = tonumber(s[2]) or 0 end
    r.allowed = c + cost <= limit
    r.w, r.old, r.new = w, c, c + cost
  elseif kind == 's' then
    local w = math.floor(now / win)
    local e = now - w * win
    local s = redis.call('HMGET', KEYS[i], 'w', 'c', 'p')
    local sw, cur, prev = tonumber(s[1]), 0, 0
    if sw == w then
      cur, prev = tonumber(s[2]) or 0, tonumber(s[3]) or 0
    elseif sw == w - 1 then
      prev = tonumber(s[2]) or 0
    end
    local capU = limit * win
    local used = prev * (win - e) + cur * win
    r.allowed = used + cost * win <= capU
    r.w, r.e, r.cur, r.prev, r.capU, r.used, r.cost = w, e, cur, prev, capU, used, cost
  else
    local capU, costU = cap * win, cost * win
    local s = redis.call('HMGET', KEYS[i], 't', 'ts')
    local tok, ts = tonumber(s[1]), tonumber(s[2])
    if tok == nil or ts == nil then
      tok, ts = capU, now
    end
    if tok > capU then tok = capU end
    local need = capU - tok
    if need > 0 then
      local el = now - ts
      if el < 0 then el = 0 end
      if el >= ceildiv(need, limit) then tok = capU else tok = tok + el * limit end
    end
    r.allowed = tok >= costU
    r.capU, r.costU, r.old, r.new = capU, costU, tok, tok - costU
  end
  if veto and not r.allowed then commit = false end
  st[i] = r
end

local out = { commit and 1 or 0 }
local before = {}
for i = 1, n do
  local r = st[i]
  local done = commit and r.allowed
  local v = r.old
  local leased = 0
  if done then
    v = r.new
    if r.kind == 'f' then
      leased = math.min(r.lease, r.limit - v)
      v = v + leased
    elseif r.kind == 's' then
      leased = math.min(r.lease, fdiv(r.capU - r.used - r.cost * r.win, r.win))
    else
      leased = math.min(r.lease, math.floor(v / r.win))
      v = v - leased * r.win
    end
  end
  local rem, retry, reset
  if r.kind == 'f' then
    local endms = (r.w + 1) * r.win - now
    before[i] = endms
    if done then
      redis.call('HSET', KEYS[i], 'w', r.w, 'c', v)
      redis.call('PEXPIRE', KEYS[i], math.max(endms, 1000))
    end
    rem = r.limit - v
    if rem < 0 then rem = 0 end
    reset = endms
    retry = 0
    if not r.allowed then retry = endms end
  elseif r.kind == 's' then
    local cur = r.cur
    if done then
      cur = cur + r.cost + leased
      redis.call('HSET', KEYS[i], 'w', r.w, 'c', cur, 'p', r.prev)
      redis.call('PEXPIRE', KEYS[i], math.max((r.w + 2) * r.win - now, 1000))
    end
    local used = r.prev * (r.win - r.e) + cur * r.win
    rem = fdiv(math.max(0, r.capU - used), r.win)
    reset, before[i] = slidingReset(cur, r.prev, r.e, r.win), slidingReset(r.cur, r.prev, r.e, r.win)
    retry = 0
    if not r.allowed then
      local at
      if r.cur + r.cost <= r.limit then
        at = r.win - fdiv((r.limit - r.cur - r.cost) * r.win, r.prev)
      elseif r.cost <= r.limit then
        at = r.win + math.max(0, r.win - fdiv((r.limit - r.cost) * r.win, r.cur))
      else
        at = 2 * r.win
      end
      retry = at - r.e
    end
  else
    if done then
      redis.call('HSET', KEYS[i], 't', v, 'ts', now)
      redis.call('PEXPIRE', KEYS[i], math.max(2 * ceildiv(r.capU, r.limit), 1000))
    end
    rem = math.floor(v / r.win)
    reset, before[i] = ceildiv(r.capU - v, r.limit), ceildiv(r.capU - r.old, r.limit)
    retry = 0
    if not r.allowed then retry = ceildiv(r.costU - r.old, r.limit) end
  end
  out[#out + 1] = r.allowed and 1 or 0
  out[#out + 1] = rem
  out[#out + 1] = retry
  out[#out + 1] = reset
  out[#out + 1] = leased
end
if ARGV[2] == '1' then
  out[#out + 1] = now
  for i = 1, n do out[#out + 1] = before[i] end
end
return out
