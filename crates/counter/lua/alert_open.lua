-- alert_open.lua: opens the alert of one firing of a (rule, group), or says which alert the firing belongs to.
-- One (rule, group) has at most one open alert: a firing while it is open repeats it; a firing after it resolved
-- opens a new one. Idempotent per firing: the same firing (a redelivered event, another worker) names the same
-- alert id (derived from the firing token), so a fleet opens it once and a retried batch finds it again.
--
-- Slots: the project keeps at most ARGV[6] alerts, open and resolved (KEYS[1]). A resolved alert's slot is
-- reusable at once: when the project is full, the resolved alert that expires first is forgotten (its hash
-- deleted) to make room, found in O(log n) in KEYS[6]. Alerts that only resolve by hand (resolveAfter 0) may
-- hold at most ARGV[10] of the open slots (KEYS[5]), so they never take every slot from the alerts that page.
--
-- KEYS[1]  zset   `<ns>:al:{<projectId>}:idx`: alert id → when it opened (unix ms): every alert the project keeps
-- KEYS[2]  string `<ns>:al:{<projectId>}:cur:<ruleId>:<group>`: the id of the (rule, group)'s open alert
-- KEYS[3]  hash   `<ns>:al:{<projectId>}:a:<alertId>`: the alert this firing would open (fields below)
-- KEYS[4]  zset   `<ns>:al:{<projectId>}:open`: open alert id → when its keys expire (unix ms, moved by
--                  alert_touch.lua; alert_change.lua takes it out on resolve)
-- KEYS[5]  zset   `<ns>:al:{<projectId>}:hand`: the open alerts of KEYS[4] that resolve only by hand, same scores
-- KEYS[6]  zset   `<ns>:al:{<projectId>}:res`: resolved alert id → when its keys expire (alert_change.lua adds)
-- ARGV[1]  now, unix ms ('' = the server's TIME)
-- ARGV[2]  the key prefix `<ns>:al:{<projectId>}:` (the other alerts' keys, same slot)
-- ARGV[3]  the new alert's id
-- ARGV[4]  the firing token
-- ARGV[5]  the alert's fixed part as JSON (kept opaque: id, rule, group, title, channels, …)
-- ARGV[6]  the most alerts the project keeps (≥ 1)
-- ARGV[7]  when it opened, unix ms
-- ARGV[8]  resolveAfter, ms (0 = never by itself: resolved by hand only)
-- ARGV[9]  how long an open alert outlives its last event, ms (every key expires)
-- ARGV[10] the most open alerts that resolve only by hand (≥ 1)
-- ARGV[11] the events it opens with (the events that made it fire, and the batch's later ones of its (rule, group);
--          '' = 0): counted here, so an alert that opens needs no second call to count its own firing
--
-- Hash fields: fixed (ARGV[5]), firing, state (firing|acknowledged|resolved), firedAt, events, last (last event,
-- unix ms), resolveAfter, ackAt, ackBy, resAt, resBy; later `m:<member key>` and `heard` (alert_hear.lua: who
-- heard of it after it opened) and `c:<firstId>` (alert_change.lua: the shared incidents its resolve closes).
--
-- Returns {code, alertId[, HGETALL of the alert…]}: code 0 = opened now (no fields: they are what the caller
-- sent, see the HSET below), 1 = this firing's alert exists already (a replay), 2 = another firing's alert of the
-- (rule, group) is open (a repeat), both with the alert's fields, 3 = not opened, the project keeps
-- ARGV[6] alerts that are all open ({3, '', 'full'}), or this alert resolves by hand only and ARGV[10] such
-- alerts are open ({3, '', 'by_hand'}).
--
-- Complexity: O(log n), plus O(k log n) for k ≤ 64 entries whose keys expired, forgotten on the way (each entry
-- is forgotten once), and O(16 log n) for entries written by an earlier version (no open/res entry) when full.
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
local after = tonumber(ARGV[8])

-- forget the entries whose keys have expired (bounded per call; each is forgotten once)
local function forget_expired(z)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 64)
  for _, id in ipairs(gone) do
    redis.call('ZREM', z, id)
    redis.call('ZREM', KEYS[5], id)
    redis.call('ZREM', KEYS[1], id)
  end
end
forget_expired(KEYS[4])
forget_expired(KEYS[6])

if after <= 0 and redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[10]) then
  -- the by-hand share is taken: make sure its oldest entries are still open alerts (one deleted or resolved
  -- outside these scripts would hold its place until it expires)
  for _, id in ipairs(redis.call('ZRANGE', KEYS[5], 0, 15)) do
    local st = redis.call('HGET', prefix .. 'a:' .. id, 'state')
    if (not st) or st == 'resolved' then
      redis.call('ZREM', KEYS[5], id)
      redis.call('ZREM', KEYS[4], id)
    end
  end
  if redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[10]) then
    return {3, '', 'by_hand'}
  end
end

if redis.call('ZCARD', KEYS[1]) >= max then
  -- a resolved alert's slot is reusable at once: forget the one that would expire first
  local oldest = redis.call('ZPOPMIN', KEYS[6])
  if oldest[1] then
    redis.call('DEL', prefix .. 'a:' .. oldest[1])
    redis.call('ZREM', KEYS[1], oldest[1])
  end
end
if redis.call('ZCARD', KEYS[1]) >= max then
  -- entries of an earlier version (no open/res entry): forget the oldest ones whose alert is resolved or gone
  local old = redis.call('ZRANGE', KEYS[1], 0, 15)
  for _, id in ipairs(old) do
    local ak = prefix .. 'a:' .. id
    local st = redis.call('HGET', ak, 'state')
    if (not st) or st == 'resolved' then
      redis.call('ZREM', KEYS[1], id)
      redis.call('DEL', ak)
    end
  end
  if redis.call('ZCARD', KEYS[1]) >= max then
    return {3, '', 'full'}
  end
end
local at = tonumber(ARGV[7])
local ttl = after + tonumber(ARGV[9])
redis.call('HSET', KEYS[3], 'fixed', ARGV[5], 'firing', ARGV[4], 'state', 'firing', 'firedAt', at,
  'events', tonumber(ARGV[11]) or 0, 'last', at, 'resolveAfter', ARGV[8])
-- lifetimes are relative to `now` (the injected clock in tests and replays, Redis TIME otherwise)
local live = math.max(at + ttl - now, 1)
redis.call('PEXPIRE', KEYS[3], live)
redis.call('SET', KEYS[2], ARGV[3], 'PX', live)
redis.call('ZADD', KEYS[1], at, ARGV[3])
redis.call('ZADD', KEYS[4], now + live, ARGV[3])
if after <= 0 then
  redis.call('ZADD', KEYS[5], now + live, ARGV[3])
end
for _, k in ipairs({KEYS[1], KEYS[4], KEYS[5], KEYS[6]}) do
  redis.call('PEXPIRE', k, live, 'NX')
  redis.call('PEXPIRE', k, live, 'GT')
end
return {0, ARGV[3]}
