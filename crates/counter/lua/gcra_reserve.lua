-- gcra_reserve.lua: a fleet-wide rate limit (GCRA, the generic cell rate algorithm) that reserves a send slot.
--
-- KEYS[1]  string `<ns>:{rl:<destination>}` = the theoretical arrival time (TAT), unix ms on the Redis clock
-- ARGV[1]  now in ms, or '' to read the server's TIME (one clock for the whole fleet)
-- ARGV[2]  emission interval in ms (1000 / messages per second)
-- ARGV[3]  burst tolerance in ms (interval * (burst - 1); 0 = strictly one message per interval)
-- ARGV[4]  longest wait in ms the caller accepts; a slot further away is not reserved
--
-- Returns {reserved, wait_ms}:
--   {1, wait}  a slot is reserved `wait` ms from now (0 = send at once): sleep that long, then send. Every
--              caller that gets a reservation sends at its own slot, so the limit holds across processes.
--   {0, wait}  the next free slot is `wait` ms away, more than ARGV[4]: nothing was reserved; delay the
--              message (never drop it) and ask again then.
--
-- Complexity: O(1); memory O(1) per destination, expiring once the destination is idle.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local interval = tonumber(ARGV[2])
local tolerance = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local wait = tat - tolerance - now
if wait < 0 then
  wait = 0
end
if wait > max_wait then
  return {0, wait}
end
local new_tat = tat + interval
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now + 1000)
return {1, wait}
