-- Checks of accounts' three windows, one after another in one atomic run;
-- see redis.go. A run holds one check or the many that a node's concurrent
-- calls sent together.
-- ARGV: 1 now in µs since the epoch, or '' to read the server's TIME
--       2 the run's deadline in µs on the same clock, or '' for none:
--         a run that starts later decides nothing (its caller has given
--         up on the reply, and answered its calls as failed)
--       3 the month key's time to live after the month ends, ms
--       4 time added to the rolling keys' lives, ms (0 but in tests)
--       5 P, the number of parameter sets, then P sets of 7:
--         the month's first instant and the next month's (µs), the second
--         window's T and τ (µs; T 0: does not limit), the minute window's
--         T and τ, and the monthly limit (<= 0: does not limit)
--       then for check i (from 1), 3 arguments: '1' to count the call or
--       '0' to peek; the seed for an absent month key, or '' when there is
--       none yet; and the index (from 1) of its parameter set.
-- KEYS[3i-2 .. 3i]: check i's second TAT, minute TAT and month counter.
-- Reply: 10 integers per check, in order: allowed, secOK, secTAT, minOK,
-- minTAT, monthOK, count, now, secUnit, minUnit, with the TATs after the
-- check (>= now), the month's count after it, and the interval each
-- window's calls are charged at when it is not the window's T (the limits
-- changed since), else 0; or -1, now, 0... when the month key is
-- absent and no seed was given, -2, now, 0... when now is not in the
-- check's month, or -3, now, 0... for every check of a run past its
-- deadline.
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function int(x)
  return string.format('%.0f', x)
end

-- The keys' values as the checks so far left them: a check reads a key
-- from Redis only the first time the run meets it, and the run writes
-- each changed key once, at its end. So the checks of one account that
-- share a run cost Redis one read and one write of each of its keys.
-- A value is a number, or false when the key is absent. A rolling
-- window's key holds "TAT U" or "TAT U M": its TAT, the interval U its
-- calls were charged at (a bare TAT, as written before U was kept, has
-- none), and M, when a call last re-expressed the window in another
-- interval (µs; a refund of a call admitted before, or in the same run,
-- gives nothing back to it, see rate.held in ratelimit.go); tee holds
-- the U, moved the M.
local cache, ttl, tee, moved = {}, {}, {}, {}
local function get(key)
  local v = cache[key]
  if v == nil then
    local r = redis.call('GET', key)
    v = false
    if r then
      local i = string.find(r, ' ', 1, true)
      if i then
        v = tonumber(string.sub(r, 1, i - 1)) or false
        local j = string.find(r, ' ', i + 1, true)
        if j then
          tee[key], moved[key] = tonumber(string.sub(r, i + 1, j - 1)), tonumber(string.sub(r, j + 1))
        else
          tee[key] = tonumber(string.sub(r, i + 1))
        end
      else
        v = tonumber(r) or false
      end
    end
    cache[key] = v
  end
  return v
end
-- set changes key to v, to live px ms from the end of the run.
local function set(key, v, px)
  cache[key] = v
  ttl[key] = px
end

local grace, pad = tonumber(ARGV[3]), tonumber(ARGV[4])

-- gcra checks a call at now against a rolling window of interval t and
-- burst tolerance tau; it answers whether the call is admitted, the TAT
-- (>= now), and the interval the window's calls were charged at when it
-- is not t: that of the limits before a change, under which the calls
-- count as calls and age at their own pace until one is admitted (see
-- "A window's state" in ratelimit.go); 0 when it is t, -1 when the key
-- holds none.
local function gcra(key, t, tau)
  if t <= 0 then
    return 1, now, 0
  end
  local tat = get(key) or 0
  if tat < now then
    tat = now
  end
  local from = tee[key]
  if from == t then
    from = 0
  elseif not from then
    from = -1
  end
  local threshold = tau
  if from > 0 then
    threshold = tau / t * from -- L - 1 calls of the unit from
  end
  if tat - now > threshold then
    return 0, tat, from
  end
  return 1, tat, from
end

-- put admits a call to the window gcra answered tat and from for: the
-- backlog re-expressed in t (rounded up) when it was charged at another
-- interval, plus t.
local function put(key, tat, t, from)
  if t <= 0 then
    return tat
  end
  if from ~= 0 then
    if from > 0 then
      tat = now + math.ceil((tat - now) * t / from)
      moved[key] = now
    end
    tee[key] = t
  end
  tat = tat + t
  set(key, tat, math.ceil((tat - now) / 1000) + pad)
  return tat
end

local sets = {}
local nsets = tonumber(ARGV[5])
if not nsets or nsets < 0 or #ARGV ~= 5 + 7 * nsets + #KEYS then
  return redis.error_reply('ERR limit.lua: the arguments do not match the keys')
end
for j = 1, nsets do
  local b = 5 + 7 * (j - 1)
  sets[j] = {tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]),
    tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])}
end

local replies = {}
-- reply appends check i's 10 integers.
local function reply(i, a, b, c, d, e, f, g, h, j, k)
  local o = 10 * (i - 1)
  replies[o + 1], replies[o + 2], replies[o + 3], replies[o + 4] = a, b, c, d
  replies[o + 5], replies[o + 6], replies[o + 7], replies[o + 8] = e, f, g, h
  replies[o + 9], replies[o + 10] = j or 0, k or 0
end

local function check(i, sKey, mKey, moKey, mode, seed, p)
  local monthEnd = p[2]
  if now < p[1] or now >= monthEnd then
    return reply(i, -2, now, 0, 0, 0, 0, 0, 0)
  end
  local monthTTL = math.ceil((monthEnd - now) / 1000) + grace
  local count = get(moKey)
  if not count then
    if seed == '' then
      return reply(i, -1, now, 0, 0, 0, 0, 0, 0)
    end
    count = tonumber(seed)
    set(moKey, count, monthTTL)
  end

  local secT, minT = p[3], p[5]
  local secOK, secTAT, secFrom = gcra(sKey, secT, p[4])
  local minOK, minTAT, minFrom = gcra(mKey, minT, p[6])
  local limit = p[7]
  local monthOK = 1
  if limit > 0 and count >= limit then
    monthOK = 0
  end

  local allowed = 0
  if secOK == 1 and minOK == 1 and monthOK == 1 then
    allowed = 1
    if mode == '1' then
      secTAT = put(sKey, secTAT, secT, secFrom)
      minTAT = put(mKey, minTAT, minT, minFrom)
      secFrom, minFrom = 0, 0
      count = count + 1
      set(moKey, count, monthTTL)
    end
  end
  reply(i, allowed, secOK, secTAT, minOK, minTAT, monthOK, count, now, math.max(secFrom, 0), math.max(minFrom, 0))
end

if ARGV[2] ~= '' and now > tonumber(ARGV[2]) then
  for i = 1, #KEYS / 3 do
    reply(i, -3, now, 0, 0, 0, 0, 0, 0)
  end
  return replies
end
local first = 5 + 7 * nsets
for i = 1, #KEYS / 3 do
  local a = first + 3 * (i - 1)
  check(i, KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[a + 1], ARGV[a + 2], sets[tonumber(ARGV[a + 3])])
end
local suffix = {} -- ' <U>' by U, formatted once a run
for key, px in pairs(ttl) do
  local v, t = int(cache[key]), tee[key]
  if t then
    local sfx = suffix[t]
    if not sfx then
      sfx = ' ' .. int(t)
      suffix[t] = sfx
    end
    v = v .. sfx
    local m = moved[key]
    if m then
      v = v .. ' ' .. int(m)
    end
  end
  redis.call('SET', key, v, 'PX', int(px))
end
return replies
