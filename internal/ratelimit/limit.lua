-- One check of an account's three windows; see redis.go.
-- KEYS: 1 second TAT, 2 minute TAT, 3 the month's counter.
-- ARGV: 1 '1' to count the call, '0' to peek
--       2 now in µs since the epoch, or '' to read the server's TIME
--       3, 4 the month's first instant and the next month's, µs
--       5 the seed for an absent month key, or '' when there is none yet
--       6, 7 second window's T and τ in µs (T 0: does not limit)
--       8, 9 minute window's T and τ in µs
--       10 monthly limit (<= 0: does not limit)
--       11 the month key's time to live after the month ends, ms
--       12 time added to the rolling keys' lives, ms (0 but in tests)
-- Reply: {allowed, secOK, secTAT, minOK, minTAT, monthOK, count, now}, with
-- the TATs after the check (>= now) and the month's count after it; or
-- {-1, now} when the month key is absent and no seed was given, or
-- {-2, now} when now is not in the month given.
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local monthEnd = tonumber(ARGV[4])
if now < tonumber(ARGV[3]) or now >= monthEnd then
  return {-2, now}
end

local function int(x)
  return string.format('%.0f', x)
end

local count = redis.call('GET', KEYS[3])
if count then
  count = tonumber(count)
elseif ARGV[5] == '' then
  return {-1, now}
else
  count = tonumber(ARGV[5])
  redis.call('SET', KEYS[3], int(count), 'PX',
    int(math.ceil((monthEnd - now) / 1000) + tonumber(ARGV[11])))
end

local function gcra(key, t, tau)
  if t <= 0 then
    return 1, now
  end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then
    tat = now
  end
  if tat - now > tau then
    return 0, tat
  end
  return 1, tat
end

local secT, minT = tonumber(ARGV[6]), tonumber(ARGV[8])
local secOK, secTAT = gcra(KEYS[1], secT, tonumber(ARGV[7]))
local minOK, minTAT = gcra(KEYS[2], minT, tonumber(ARGV[9]))
local limit = tonumber(ARGV[10])
local monthOK = 1
if limit > 0 and count >= limit then
  monthOK = 0
end

local allowed = 0
if secOK == 1 and minOK == 1 and monthOK == 1 then
  allowed = 1
  if ARGV[1] == '1' then
    local function put(key, tat, t)
      if t <= 0 then
        return tat
      end
      tat = tat + t
      redis.call('SET', key, int(tat), 'PX', int(math.ceil((tat - now) / 1000) + tonumber(ARGV[12])))
      return tat
    end
    secTAT = put(KEYS[1], secTAT, secT)
    minTAT = put(KEYS[2], minTAT, minT)
    count = redis.call('INCR', KEYS[3])
  end
end
return {allowed, secOK, secTAT, minOK, minTAT, monthOK, count, now}
