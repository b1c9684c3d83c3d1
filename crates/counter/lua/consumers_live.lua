-- consumers_live.lua: reads the registry consumers_beat.lua writes, without changing it.
--
-- KEYS[1]  sorted set `<ns>:consumers:{<queue>}` (see consumers_beat.lua)
-- KEYS[2]  string `<ns>:consumers:{<queue>}:events` (see consumers_beat.lua)
-- ARGV[1]  at most this many labels are returned (> 0)
--
-- Returns {live, events_ms_ago, label…}: the number of live registrations, how many ms ago a registered consumer
-- last reported events (-1: none reported within the report's lifetime), and up to ARGV[1] live labels, the
-- longest-lived registration first.
--
-- Complexity: O(log N + ARGV[1]) for N registrations.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')
local seen = redis.call('GET', KEYS[2])
local ago = -1
if seen then
  ago = math.max(0, now - tonumber(seen))
end
local out = {live, ago}
local labels = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(' .. string.format('%.0f', now), 'LIMIT', 0, tonumber(ARGV[1]))
for _, l in ipairs(labels) do
  out[#out + 1] = l
end
return out
