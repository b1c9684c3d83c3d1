-- digest_append.lua: the leading-edge decision for one firing of a (project, rule, channel) with minPeriod > 0:
-- "send now" when the channel is quiet, else "buffer" into the digest of the current window.
--
-- KEYS[1]  hash   `<ns>:{dg:<project>:<rule>:<channel>}:win`  {start = previous message ms, opener = id}
-- KEYS[2]  hash   `…:buf`  groupHash -> cjson {count, title, repetitionId}, merged by max count
-- KEYS[3]  set    `…:ids`  notification ids already seen (idempotence of redelivered firings)
-- KEYS[4]  string `…:last` "<ms>|<id>" of the last message sent; quiet when absent or older than minPeriod
--          (it lives minPeriod + keep ms, so a late redelivery of a leading-edge firing is still recognised)
-- ARGV[1]  notification id of the firing
-- ARGV[2]  groupHash
-- ARGV[3]  count
-- ARGV[4]  title
-- ARGV[5]  repetition id, '' when none
-- ARGV[6]  min period in ms (> 0)
-- ARGV[7]  now in ms, or '' to read the server's TIME
-- ARGV[8]  most groups kept per window (later new groups are ignored; existing ones still merge)
-- ARGV[9]  keep ms: how long keys live after the last append (safety net; the flush normally deletes them)
--
-- Returns {action, start_ms, now_ms}:
--   action 2 = send now (leading edge): the channel was quiet; `last` now holds this firing. A redelivery of
--              that same firing answers 2 again (same notification id: the sender drops a duplicate).
--   action 1 = buffered and the caller must schedule the window's flush at start_ms + minPeriod (this append
--              opened the window, is a redelivery of the one that did, or the window is overdue by a minute).
--   action 0 = buffered, nothing to schedule.
-- start_ms is the time of the previous message: the digest is due minPeriod after it.
-- Scheduling twice is harmless: the claim is atomic.
--
-- Complexity: O(1); memory O(groups) per open window plus O(firings in `keep`) ids.
local now
if ARGV[7] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[7])
end
local id = ARGV[1]
local period = tonumber(ARGV[6])
local keep = tonumber(ARGV[9])

local function parse_last()
  local v = redis.call('GET', KEYS[4])
  if not v then return nil, nil end
  local sep = string.find(v, '|', 1, true)
  if not sep then return nil, nil end
  return tonumber(string.sub(v, 1, sep - 1)), string.sub(v, sep + 1)
end

local start = tonumber(redis.call('HGET', KEYS[1], 'start'))
local last_ms, last_id = parse_last()
if redis.call('SADD', KEYS[3], id) == 0 then
  -- a redelivered firing: count nothing again
  if last_id == id then
    return {2, last_ms, now}
  end
  local schedule = 0
  if start and redis.call('HGET', KEYS[1], 'opener') == id then
    schedule = 1
  end
  return {schedule, start or now, now}
end
redis.call('PEXPIRE', KEYS[3], keep)

local schedule = 0
if not start then
  if (not last_ms) or now >= last_ms + period then
    -- quiet: the leading edge goes out at once
    redis.call('SET', KEYS[4], now .. '|' .. id, 'PX', period + keep)
    return {2, now, now}
  end
  -- a message went out less than minPeriod ago: open the window that is due minPeriod after it
  start = last_ms
  redis.call('HSET', KEYS[1], 'start', start, 'opener', id)
  schedule = 1
elseif now >= start + period + 60000 then
  schedule = 1
end

local group = ARGV[2]
local count = tonumber(ARGV[3])
local old = redis.call('HGET', KEYS[2], group)
local keepit = true
if old then
  local o = cjson.decode(old)
  if tonumber(o['count']) >= count then
    keepit = false
  end
elseif redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[8]) then
  keepit = false
end
if keepit then
  local rep = ARGV[5]
  if rep == '' then rep = cjson.null end
  redis.call('HSET', KEYS[2], group, cjson.encode({count = count, title = ARGV[4], repetitionId = rep}))
end
redis.call('PEXPIRE', KEYS[1], period + keep)
redis.call('PEXPIRE', KEYS[2], period + keep)
return {schedule, start, now}
