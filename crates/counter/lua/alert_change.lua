-- alert_change.lua: one step of an alert's life, atomically: resolve (when `resolveAfter` has passed without
-- events, or by hand, or on the project's next event for NO_EVENTS) or acknowledge. A resolved alert frees its
-- (rule, group): the next firing opens a new alert. Answers the same for a replay, so a redelivered timer or a
-- retried request finds what the first one did.
--
-- KEYS[1]  hash `<ns>:al:{<projectId>}:a:<alertId>` (fields: see alert_open.lua)
-- ARGV[1]  now, unix ms ('' = the server's TIME)
-- ARGV[2]  the key prefix `<ns>:al:{<projectId>}:`
-- ARGV[3]  what: `due` (resolve when last + resolveAfter ≤ now: the timer), `resolve` (now, by ARGV[4]), `ack`
-- ARGV[4]  by whom or what (`timeout` for `due`)
-- ARGV[5]  how long a resolved alert is kept, ms
-- ARGV[6]  the (rule, group)'s key suffix `<ruleId>:<group>` (its `cur:` key is prefix .. 'cur:' .. this)
--
-- Returns {code, …}: {0} not found; {1, HGETALL} done now; {2, HGETALL} already resolved; {3, dueMs} not due yet
-- (`due` only: an event came since); {4, HGETALL} never resolves by itself (`due` with resolveAfter 0);
-- {5, HGETALL} already acknowledged (`ack` only).
--
-- A resolve moves the alert from `<prefix>open` (and `<prefix>hand`) to `<prefix>res` (zset id → when its keys
-- expire), so its slot is reusable at once (alert_open.lua).
--
-- A resolve also takes the alert out of each shared incident it was listed in (its `m:s:<firstId>` fields, see
-- alert_hear.lua; the set `<prefix>inc:<firstId>`): when that leaves the set empty, the alert was the incident's
-- last open alert and records `c:<firstId>` = 1 in its hash, so its resolve closes the incident, and a replay
-- answers the same fields.
--
-- Complexity: O(log n), plus O(f) for the fields of a resolved alert's hash (f ≤ 12 + 2 × 32: at most 32 heard
-- members and as many incidents it closes).
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ak = KEYS[1]
local st = redis.call('HGET', ak, 'state')
if not st then
  return {0}
end
if st == 'resolved' then
  return {2, redis.call('HGETALL', ak)}
end
local what = ARGV[3]
if what == 'ack' then
  if st == 'acknowledged' then
    return {5, redis.call('HGETALL', ak)}
  end
  redis.call('HSET', ak, 'state', 'acknowledged', 'ackAt', now, 'ackBy', ARGV[4])
  return {1, redis.call('HGETALL', ak)}
end
if what == 'due' then
  local after = tonumber(redis.call('HGET', ak, 'resolveAfter')) or 0
  if after <= 0 then
    return {4, redis.call('HGETALL', ak)}
  end
  local due = (tonumber(redis.call('HGET', ak, 'last')) or 0) + after
  if now < due then
    return {3, due}
  end
end
redis.call('HSET', ak, 'state', 'resolved', 'resAt', now, 'resBy', ARGV[4])
redis.call('PEXPIRE', ak, tonumber(ARGV[5]))
local cur_key = ARGV[2] .. 'cur:' .. ARGV[6]
local id = string.sub(ak, string.len(ARGV[2]) + 3)
for _, f in ipairs(redis.call('HKEYS', ak)) do
  if string.sub(f, 1, 4) == 'm:s:' then
    local first = string.sub(f, 5)
    local inc = ARGV[2] .. 'inc:' .. first
    redis.call('SREM', inc, id)
    if redis.call('SCARD', inc) == 0 then
      redis.call('HSET', ak, 'c:' .. first, 1)
    end
  end
end
if redis.call('GET', cur_key) == id then
  redis.call('DEL', cur_key)
end
-- its slot is reusable at once: out of the open alerts, into the resolved ones (alert_open.lua forgets the one
-- that expires first when the project is full)
redis.call('ZREM', ARGV[2] .. 'open', id)
redis.call('ZREM', ARGV[2] .. 'hand', id)
if redis.call('ZSCORE', ARGV[2] .. 'idx', id) then
  local res = ARGV[2] .. 'res'
  redis.call('ZADD', res, now + tonumber(ARGV[5]), id)
  redis.call('PEXPIRE', res, tonumber(ARGV[5]), 'NX')
  redis.call('PEXPIRE', res, tonumber(ARGV[5]), 'GT')
end
redis.call('PEXPIRE', ARGV[2] .. 'idx', tonumber(ARGV[5]), 'GT')
return {1, redis.call('HGETALL', ak)}
