-- no_events_due.lua: one NO_EVENTS rule's timer came due: fire once, reschedule to the project's last event +
-- quietPeriod, or nothing (a stale timer: another one is pending, or none should be). Exactly once across a
-- fleet: only the timer the hash names as pending (`t:<rule>` equal to its due time) acts, and acting moves
-- `t:`, so a duplicate timer or a second worker finds it stale. A redelivered timer (its first handling may have
-- died before publishing) gets the answer of its first handling again.
--
-- KEYS[1]  hash `<ns>:ne:{<projectId>}` (fields: see no_events_seen.lua)
-- ARGV[1]  now, unix ms ('' = the server's TIME)
-- ARGV[2]  the rule id
-- ARGV[3]  the timer's due time, unix ms (the `t:<rule>` it was scheduled for)
-- ARGV[4]  the rule's quietPeriod now, ms; 0 when the rule is gone, disabled or no longer NO_EVENTS (its state is
--          forgotten)
-- ARGV[5]  `1` when this timer message was delivered before
-- ARGV[6]  how long the hash lives after a reschedule, ms
-- ARGV[7]  how long it lives after a firing, ms (as long as the alert it opens: the next event must find it)
--
-- Returns {0} stale (nothing to do); {1, dueMs} reschedule the timer at dueMs; {2, sinceMs, lastMs, nowMs} fire
-- (the silence that started at sinceMs; lastMs the project's last event, -1 when none was seen);
-- {3} the rule's state forgotten.
--
-- Complexity: O(1).
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local k = KEYS[1]
local rule = ARGV[2]
local at = tonumber(ARGV[3])
local quiet = tonumber(ARGV[4])
if quiet <= 0 then
  redis.call('HDEL', k, 't:' .. rule, 'a:' .. rule, 'f:' .. rule, 'd:' .. rule)
  return {3}
end
local t = tonumber(redis.call('HGET', k, 't:' .. rule))
local last = tonumber(redis.call('HGET', k, 'last'))
if t ~= at then
  if ARGV[5] == '1' and tonumber(redis.call('HGET', k, 'd:' .. rule)) == at then
    if t then
      return {1, t}
    end
    local open = tonumber(redis.call('HGET', k, 'f:' .. rule))
    if open then
      return {2, open, last or -1, now}
    end
  end
  return {0}
end
local since = last or tonumber(redis.call('HGET', k, 'a:' .. rule))
if not since then
  redis.call('HDEL', k, 't:' .. rule)
  return {0}
end
local due = since + quiet
if now < due then
  redis.call('HSET', k, 't:' .. rule, due, 'd:' .. rule, at)
  local ttl = tonumber(ARGV[6])
  redis.call('PEXPIRE', k, ttl, 'NX')
  redis.call('PEXPIRE', k, ttl, 'GT')
  return {1, due}
end
redis.call('HDEL', k, 't:' .. rule)
redis.call('HSET', k, 'f:' .. rule, since, 'd:' .. rule, at)
local keep = tonumber(ARGV[7])
redis.call('PEXPIRE', k, keep, 'NX')
redis.call('PEXPIRE', k, keep, 'GT')
return {2, since, last or -1, now}
