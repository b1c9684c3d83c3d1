-- alert_hear.lua: records who heard of open alerts after they opened (an escalation step's new endpoint, a
-- digest or a quiet-hours release that listed them), so their acknowledge and resolve reach them. All alerts of
-- one project (one slot). Idempotent: a member already recorded is kept as it was (its first message stays the
-- first); an alert that is gone or resolved records nothing; at most ARGV[2] members per alert, more are dropped.
-- A shared member (a message that listed several alerts) also adds the alert to its incident's set, which the
-- resolve (alert_change.lua) empties: the last listed alert to resolve closes the incident.
--
-- KEYS[i]  hash `<ns>:al:{<projectId>}:a:<alertId>` (fields: see alert_open.lua; this adds `m:<member key>` =
--          the member as JSON, and `heard` = how many `m:` fields)
-- ARGV[1]  the key prefix `<ns>:al:{<projectId>}:` (an incident's set is prefix .. 'inc:' .. its first id)
-- ARGV[2]  the most members one alert hears of (≥ 0)
-- ARGV[3i]      KEYS[i]'s member key (`klaxon_core::alert::AlertChannel::member_key`)
-- ARGV[3i + 1]  the member as JSON
-- ARGV[3i + 2]  for a shared member its incident's first id, else ''
--
-- Returns {code per KEYS[i]}: 0 recorded now, 1 recorded already, 2 not recorded: the alert has ARGV[2]
-- members, 3 not recorded: the alert is gone or resolved.
--
-- Complexity: O(1) per record.
local prefix = ARGV[1]
local max = tonumber(ARGV[2])
local out = {}
for i, ak in ipairs(KEYS) do
  local field = 'm:' .. ARGV[3 * i]
  local st = redis.call('HGET', ak, 'state')
  if (not st) or st == 'resolved' then
    out[i] = 3
  elseif redis.call('HEXISTS', ak, field) == 1 then
    out[i] = 1
  elseif (tonumber(redis.call('HGET', ak, 'heard')) or 0) >= max then
    out[i] = 2
  else
    redis.call('HSET', ak, field, ARGV[3 * i + 1])
    redis.call('HINCRBY', ak, 'heard', 1)
    local first = ARGV[3 * i + 2]
    if first ~= '' then
      local inc = prefix .. 'inc:' .. first
      redis.call('SADD', inc, string.sub(ak, string.len(prefix) + 3))
      -- the incident's set lives as long as the longest-lived alert it lists
      local live = redis.call('PTTL', ak)
      if live > 0 then
        redis.call('PEXPIRE', inc, live, 'NX')
        redis.call('PEXPIRE', inc, live, 'GT')
      end
    end
    out[i] = 0
  end
end
return out
