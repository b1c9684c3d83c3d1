-- mute_add.lua: stores a mute unless its project already has the most active mutes it may have
-- (--max-mutes-per-project). Check and write are one step, so concurrent adds never pass the limit together.
-- A mute made by an action link also records the link's use in the same step, so a link mutes once: after its
-- mute is undone or deleted, confirming it again does nothing (across a fleet, whatever the timing).
--
-- KEYS[1]  hash `<ns>:mutes:{<projectId>}`: field = mute id, value = the mute as JSON (`untilMs`: its end, unix
--          ms); see crates/counter/src/mutes.rs
-- KEYS[2]  (action links only) string `<ns>:link-used:{<projectId>}:<muteId>`: when the link was used (unix ms),
--          expiring with the link
-- ARGV[1]  now, unix ms ('' = the server's TIME)
-- ARGV[2]  the mute id
-- ARGV[3]  the mute as JSON
-- ARGV[4]  its end, unix ms (the key lives at least until then: PEXPIREAT NX, then GT)
-- ARGV[5]  the most active mutes the project may have (≥ 1)
-- ARGV[6]  (with KEYS[2]) when the link expires, unix ms: the record of its use lives until then
--
-- Returns {1, active} when stored, {0, active} when refused (the project is at the limit), {2, active, usedAtMs}
-- when KEYS[2] says the link was used already (nothing is written); `active` counts the stored mutes after the
-- call. A mute id that is already stored is replaced (it counts once). A refused mute does not use the link.
--
-- Complexity: O(1) below the limit. At the limit, O(n) once (n = stored mutes): expired and unreadable mutes are
-- removed first, so only a project that is really full is refused.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local max = tonumber(ARGV[5])
local n = redis.call('HLEN', KEYS[1])
if KEYS[2] ~= nil then
  local used = redis.call('GET', KEYS[2])
  if used then
    return {2, n, tonumber(used) or 0}
  end
end
if n >= max and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local ok, m = pcall(cjson.decode, all[i + 1])
    local untilMs = ok and type(m) == 'table' and tonumber(m.untilMs) or nil
    if untilMs == nil or untilMs <= now then
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
  n = redis.call('HLEN', KEYS[1])
  if n >= max then
    return {0, n}
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[4], 'NX')
redis.call('PEXPIREAT', KEYS[1], ARGV[4], 'GT')
if KEYS[2] ~= nil then
  redis.call('SET', KEYS[2], now)
  redis.call('PEXPIREAT', KEYS[2], ARGV[6])
end
return {1, redis.call('HLEN', KEYS[1])}
