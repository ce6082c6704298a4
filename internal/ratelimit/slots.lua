-- Takes one of an account's slots (its open WebSocket connections), on
-- every node that shares this Redis. See slots.go.
--
-- KEYS[1]  the account's slots: a sorted set of slot -> lease end
--          (milliseconds, on Redis's clock)
-- ARGV[1]  the slot to take, unique to its node
-- ARGV[2]  the cap: how many slots the account may hold
-- ARGV[3]  the lease, in milliseconds: a slot its node stops renewing
--          (a crash) is freed after it
--
-- Returns 1 when the slot is taken, 0 when the account holds the cap.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
