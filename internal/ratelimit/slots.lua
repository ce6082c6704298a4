-- Takes one of an account's slots (its open WebSocket connections), on
-- every node that shares this Redis. See slots.go.
--
-- KEYS[1]  the account's slots: a sorted set of slot -> lease end
--          (milliseconds, on Redis's clock)
-- ARGV[1]  the slot to take, unique to its node
-- ARGV[2]  the cap: how many slots the account may hold
-- ARGV[3]  the lease, in milliseconds: a slot its node stops renewing
--          (a crash) is freed after it
-- ARGV[4]  the deadline, in milliseconds on Redis's clock (0: none): a
--          run that starts past it, after the node gave up waiting for
--          its reply, changes nothing
--
-- Returns {1, now} when the slot is taken, {0, now} when the account
-- holds the cap, {-1, now} past the deadline; now is Redis's clock in ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[4])
if deadline > 0 and now > deadline then
  return {-1, now}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return {0, now}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, now}
