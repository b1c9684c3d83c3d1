-- consumers_beat.lua: one Klaxon consumer of a queue says it is alive (or that it stopped). The registry lets
-- `klaxon doctor` and the workers tell Klaxon's consumers of the events queue from other applications' (the
-- queue's consumer count, read by a passive declare, minus the live registrations here).
--
-- KEYS[1]  sorted set `<ns>:consumers:{<queue>}`: member = a consumer's label, score = the Redis server time (ms)
--          at which its registration runs out unless it beats again
-- KEYS[2]  string `<ns>:consumers:{<queue>}:events` = the server time (ms) a registered consumer last reported
--          events taken from the queue; it expires ARGV[4] ms after that report
-- ARGV[1]  the consumer's label (`klaxon worker <host> <pid> <session>`)
-- ARGV[2]  how long the registration lasts without another beat, ms (> 0)
-- ARGV[3]  events the consumer took since its previous beat (0: none)
-- ARGV[4]  how long a report of events is kept, ms (> 0)
-- ARGV[5]  1 to register or refresh, 0 to leave (the consumer stopped consuming)
--
-- Returns the number of live registrations after this call.
--
-- Complexity: O(log N + M) for N registrations, M of them expired and removed. Memory O(N); both keys expire.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
-- the set lives as long as its longest registration (an empty set is gone already)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[2], string.format('%.0f', now), 'PX', ARGV[4])
end
return redis.call('ZCARD', KEYS[1])
