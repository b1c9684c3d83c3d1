-- alert_open.lua: opens the alert of one firing of a (rule, group), or says which alert the firing belongs to.
-- One (rule, group) has at most one open alert: a firing while it is open repeats it; a firing after it resolved
-- opens a new one. Idempotent per firing: the same firing (a redelivered event, another worker) names the same
-- alert id (derived from the firing token), so a fleet opens it once and a retried batch finds it again.
--
-- KEYS[1]  zset   `<ns>:al:{<projectId>}:idx`: alert id → when it opened (unix ms); at most ARGV[6] entries
-- KEYS[2]  string `<ns>:al:{<projectId>}:cur:<ruleId>:<group>`: the id of the (rule, group)'s open alert
-- KEYS[3]  hash   `<ns>:al:{<projectId>}:a:<alertId>`: the alert this firing would open (fields below)
-- ARGV[1]  now, unix ms ('' = the server's TIME)
-- ARGV[2]  the key prefix `<ns>:al:{<projectId>}:` (the other alerts' keys, same slot)
-- ARGV[3]  the new alert's id
-- ARGV[4]  the firing token
-- ARGV[5]  the alert's fixed part as JSON (kept opaque: id, rule, group, title, channels, …)
-- ARGV[6]  the most alerts the project keeps (≥ 1)
-- ARGV[7]  when it opened, unix ms
-- ARGV[8]  resolveAfter, ms (0 = never by itself)
-- ARGV[9]  how long an open alert outlives its last event, ms (every key expires)
--
-- Hash fields: fixed (ARGV[5]), firing, state (firing|acknowledged|resolved), firedAt, events, last (last event,
-- unix ms), resolveAfter, ackAt, ackBy, resAt, resBy; later `m:<member key>` and `heard` (alert_hear.lua: who
-- heard of it after it opened) and `c:<firstId>` (alert_change.lua: the shared incidents its resolve closes).
--
-- Returns {code, alertId, HGETALL of the alert…}: code 0 = opened now, 1 = this firing's alert exists already (a
-- replay), 2 = another firing's alert of the (rule, group) is open (a repeat), 3 = not opened, the project keeps
-- ARGV[6] alerts that are all open ({3, ''}).
--
-- Complexity: O(1), plus O(k log n) for k ≤ 16 stale entries trimmed from a full index.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local prefix = ARGV[2]
local cur = redis.call('GET', KEYS[2])
if cur then
  local ak = prefix .. 'a:' .. cur
  local st = redis.call('HGET', ak, 'state')
  if st and st ~= 'resolved' then
    if redis.call('HGET', ak, 'firing') == ARGV[4] then
      return {1, cur, redis.call('HGETALL', ak)}
    end
    return {2, cur, redis.call('HGETALL', ak)}
  end
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {1, ARGV[3], redis.call('HGETALL', KEYS[3])}
end
local max = tonumber(ARGV[6])
if redis.call('ZCARD', KEYS[1]) >= max then
  -- forget the oldest entries whose alert is resolved or gone (their keys expire on their own)
  local old = redis.call('ZRANGE', KEYS[1], 0, 15)
  for _, id in ipairs(old) do
    local st = redis.call('HGET', prefix .. 'a:' .. id, 'state')
    if (not st) or st == 'resolved' then
      redis.call('ZREM', KEYS[1], id)
    end
  end
  if redis.call('ZCARD', KEYS[1]) >= max then
    return {3, ''}
  end
end
local at = tonumber(ARGV[7])
local ttl = tonumber(ARGV[8]) + tonumber(ARGV[9])
redis.call('HSET', KEYS[3], 'fixed', ARGV[5], 'firing', ARGV[4], 'state', 'firing', 'firedAt', at,
  'events', 0, 'last', at, 'resolveAfter', ARGV[8])
-- lifetimes are relative to `now` (the injected clock in tests and replays, Redis TIME otherwise)
local live = math.max(at + ttl - now, 1)
redis.call('PEXPIRE', KEYS[3], live)
redis.call('SET', KEYS[2], ARGV[3], 'PX', live)
redis.call('ZADD', KEYS[1], at, ARGV[3])
redis.call('PEXPIRE', KEYS[1], live, 'NX')
redis.call('PEXPIRE', KEYS[1], live, 'GT')
return {0, ARGV[3], redis.call('HGETALL', KEYS[3])}
