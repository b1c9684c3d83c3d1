-- no_events_seen.lua: a project with NO_EVENTS rules was seen (it sent events), or one of its NO_EVENTS rules was
-- stored through Klaxon (armed): moves the project's last event, says which rules need their one timer scheduled
-- (none pending, a pending one that is now too late, or one that was lost) and which silences that fired are
-- still open (the event ends them: the caller resolves their alerts, then settles them, no_events_settle.lua).
-- One small hash per project; the rules' timers live in the delay engine, never one per event.
--
-- KEYS[1]  hash `<ns>:ne:{<projectId>}` (same slot as the project's alerts): fields `last` (the project's last
--          event, unix ms), and per rule `t:<rule>` (when its pending timer is due), `a:<rule>` (when it was armed,
--          before any event), `f:<rule>` (the start of its open silence, that fired), `d:<rule>` (the due time of
--          the last timer that acted, see no_events_due.lua)
-- ARGV[1]  now, unix ms ('' = the server's TIME)
-- ARGV[2]  `event` (events arrived now: `last` moves to now, open silences are reported) or `arm` (rules stored
--          through Klaxon: a rule with no event yet starts its clock now; `last` untouched)
-- ARGV[3]  `1` when the events were delivered before (a redelivered batch): pending timers are scheduled again,
--          since the first delivery may have died before publishing them (a duplicate timer is dropped as stale)
-- ARGV[4]  how long the hash lives after this write, ms (a little more than the longest quietPeriod; never
--          shortened while a silence is open)
-- ARGV[5], ARGV[6], …  rule id, its quietPeriod (ms), for each watched rule of the project
--
-- Returns a flat array of triples {code, ruleId, ms, …}: code 1 = schedule the rule's timer, due at ms (unix);
-- code 2 = the rule's silence that started at ms fired and is still open: resolve its alert.
--
-- Complexity: O(rules).
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- a pending timer this late was lost (a crash between this script and the publish): schedule it again
local GRACE = 60000
local k = KEYS[1]
local event = ARGV[2] == 'event'
local replay = ARGV[3] == '1'
local last = tonumber(redis.call('HGET', k, 'last'))
if event and ((not last) or now > last) then
  last = now
  redis.call('HSET', k, 'last', now)
end
local out = {}
local any_open = false
for i = 5, #ARGV, 2 do
  local rule = ARGV[i]
  local quiet = tonumber(ARGV[i + 1])
  local open = redis.call('HGET', k, 'f:' .. rule)
  any_open = any_open or (open ~= false)
  if open and event then
    table.insert(out, 2)
    table.insert(out, rule)
    table.insert(out, tonumber(open))
  end
  -- armed with a silence open: its next event restarts the clock, not the storing
  if event or not open then
    local since = last
    if not since then
      redis.call('HSETNX', k, 'a:' .. rule, now)
      since = tonumber(redis.call('HGET', k, 'a:' .. rule))
    end
    local due = since + quiet
    local t = tonumber(redis.call('HGET', k, 't:' .. rule))
    local schedule = replay and t ~= nil
    if (not t) or due < t or now > t + GRACE then
      redis.call('HSET', k, 't:' .. rule, due)
      t = due
      schedule = true
    end
    if schedule then
      table.insert(out, 1)
      table.insert(out, rule)
      table.insert(out, t)
    end
  end
end
local ttl = tonumber(ARGV[4])
if any_open then
  -- an open silence keeps the hash as long as its alert (set when it fired)
  redis.call('PEXPIRE', k, ttl, 'NX')
  redis.call('PEXPIRE', k, ttl, 'GT')
else
  redis.call('PEXPIRE', k, ttl)
end
return out
