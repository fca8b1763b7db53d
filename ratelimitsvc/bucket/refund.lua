-- Gives back what check.lua took from buckets of one hash slot, when another
-- slot of the same request denied it (Redis.checkSpread in redis.go). After
-- it, each bucket decides as if the request had never been checked: the
-- taken tokens are added back (token bucket, at most to capacity), or the
-- count of the window they were taken in goes down (fixed and sliding
-- windows; a sliding window's previous-window count once the window turned,
-- nothing once a fixed window has ended). Keys and TTLs are kept.
-- KEYS[i]: bucket keys, all in one hash slot.
-- ARGV[1]: the ms check.lua ran at (the second element of its reply).
-- ARGV[2+4(i-1) ..]: kind ("t" | "f" | "s"), capacity, window ms, tokens
--   taken (cost + leased).
local now = tonumber(ARGV[1])
for i = 1, #KEYS do
  local o = 2 + (i - 1) * 4
  local kind, cap, win, n = ARGV[o], tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  local w = math.floor(now / win)
  if kind == 'f' then
    local s = redis.call('HMGET', KEYS[i], 'w', 'c')
    if tonumber(s[1]) == w then
      redis.call('HSET', KEYS[i], 'c', math.max(0, (tonumber(s[2]) or 0) - n))
    end
  elseif kind == 's' then
    local s = redis.call('HMGET', KEYS[i], 'w', 'c', 'p')
    local sw = tonumber(s[1])
    if sw == w then
      redis.call('HSET', KEYS[i], 'c', math.max(0, (tonumber(s[2]) or 0) - n))
    elseif sw == w + 1 then
      redis.call('HSET', KEYS[i], 'p', math.max(0, (tonumber(s[3]) or 0) - n))
    end
  else
    local t = tonumber(redis.call('HGET', KEYS[i], 't'))
    if t ~= nil then
      redis.call('HSET', KEYS[i], 't', math.min(cap * win, t + n * win))
    end
  end
end
return 1
