-- Baseline for the benchmark only: the shape of Hawk's notifier counter (a hash holding the window start
-- and a count, reset when the window is over, incremented per event). Hawk sends this text with EVAL for
-- every event, one at a time; the bench does the same to compare.
-- KEYS[1] hash; ARGV[1] now ms; ARGV[2] period ms. Returns the new count.
local start = tonumber(redis.call('HGET', KEYS[1], 'timestamp'))
local now = tonumber(ARGV[1])
if start == nil or now >= start + tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'timestamp', now, 'eventsCount', 0)
end
return redis.call('HINCRBY', KEYS[1], 'eventsCount', 1)
