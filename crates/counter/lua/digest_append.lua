-- digest_append.lua: the leading-edge decision for one firing (or an alert's resolve) on a channel with
-- `minPeriod > 0`: send it at once (the channel is quiet), or add it to the digest buffer of the (project, rule,
-- channel) and say whether the caller must schedule the window's flush.
--
-- KEYS[1]  hash   `<ns>:{dg:<project>:<rule>:<channel>}:win`  {start = window start ms, opener = notification id;
--                  a hold's also dest = the redacted destination}
-- KEYS[2]  hash   `…:buf`  entry -> cjson {count, title, repetitionId, openForMs?, silenceMs?, alertId?}, merged by
--                  max count;
--                  and four counters (fields starting with `#`, never an entry: entries start with `f:` or `r:`):
--                  `#f` / `#r` entries listed that fired / resolved, `#mf` / `#mr` firings / resolves past the bound
-- KEYS[3]  zset   `…:idz`  notification ids appended in the last `minPeriod` + 10 minutes, scored by append time
--                  (idempotence of redelivered firings; bounded by the firing rate, not by how long the channel
--                  stays busy: older ids are trimmed on every append)
-- KEYS[4]  hash   `…:last` {at = ms of the last message sent on the channel, id = its notification id when it was a
--                  firing sent at once}; expires `minPeriod` after `at` (a quiet channel has none)
-- ARGV[1]  now in ms, or '' to read the server's TIME
-- ARGV[2]  notification id of the firing
-- ARGV[3]  the entry: its kind, then the group (`f:<group>` fired, `r:<group>` resolved; a buffer of an earlier
--          version holds bare groups, all fired)
-- ARGV[4]  count
-- ARGV[5]  title
-- ARGV[6]  repetition id, '' when none
-- ARGV[7]  min period in ms (> 0)
-- ARGV[8]  most groups listed per window and per kind (fired, resolved: resolves are never crowded out by
--          firings); a new group past it is counted in `#mf` / `#mr` instead (existing ones still merge)
-- ARGV[9]  keep ms: how long keys live after the last append (safety net; the flush normally deletes them)
-- ARGV[10] hold-until ms, or '' (or absent) for a digest. Set: a quiet window (`quietHours`) holds the firing until
--          this time, on the hold's sibling keys (`…:quiet:*`, same hash tag): the window is due at exactly that
--          time (its `start` is the due time and the caller claims it with a period of 0), ARGV[7] is unused, the
--          ids are kept until the window is due (no trimming), and `…:last` is neither read nor written.
-- ARGV[11] a resolved entry's open-for ms (how long its alert was open), kept as `openForMs`; '' (or absent)
--          otherwise
-- ARGV[12] a NO_EVENTS silence's quiet period ms, kept as `silenceMs`; '' (or absent) for any other entry
-- ARGV[13] with a hold-until: the redacted destination of the message the hold will release (the opener's), kept
--          in `…:quiet:win` as `dest` for the listing of held messages (`klaxon deliveries list`); '' (or
--          absent) for none
-- ARGV[14] the alert the entry is about (its id), kept as `alertId` for the listing of held messages; '' (or
--          absent) for none
--
-- Returns {action, start_ms, now_ms}:
--   action = 2: send this firing (or resolve) now, alone (leading edge): no message on the channel in the last
--               `minPeriod` and no window open. Also returned for the redelivery of that message (same id: the
--               sender dedups).
--   action = 1: buffered, and the caller schedules the window's flush at start + minPeriod, where start is the
--               time of the previous message (so the digest goes out `minPeriod` after it). Also for the
--               redelivery of the append that opened the window, and for a window overdue by more than a minute
--               (its flush was lost). Scheduling twice is harmless: the claim is atomic.
--   action = 0: buffered into a window whose flush is already scheduled.
-- With a hold-until: action 2 when it is already past (the window ended: send now); action 1 when this append
--   opened the hold, moved its due time (the rule's windows changed, or a lost hold is found by the next window)
--   or is the redelivery of the one that did; 0 otherwise. start_ms is the due time.
--
-- Complexity: O(log ids); memory O(groups) per open window plus the ids of the last `minPeriod` + 10 minutes.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local id = ARGV[2]
local period = tonumber(ARGV[7])
local keep = tonumber(ARGV[9])

local function buffer(expire)
  local group = ARGV[3]
  local count = tonumber(ARGV[4])
  local kind = 'f'
  if string.sub(group, 1, 2) == 'r:' then
    kind = 'r'
  end
  local old = redis.call('HGET', KEYS[2], group)
  local keepit = true
  if old then
    local o = cjson.decode(old)
    if tonumber(o['count']) >= count then
      keepit = false
    end
  elseif (tonumber(redis.call('HGET', KEYS[2], '#' .. kind)) or 0) >= tonumber(ARGV[8]) then
    -- past the list's bound: counted, never dropped silently
    keepit = false
    redis.call('HINCRBY', KEYS[2], '#m' .. kind, 1)
  else
    redis.call('HINCRBY', KEYS[2], '#' .. kind, 1)
  end
  if keepit then
    local rep = ARGV[6]
    if rep == '' then rep = cjson.null end
    local entry = {count = count, title = ARGV[5], repetitionId = rep}
    if ARGV[11] and ARGV[11] ~= '' then
      entry['openForMs'] = tonumber(ARGV[11])
    end
    if ARGV[12] and ARGV[12] ~= '' then
      entry['silenceMs'] = tonumber(ARGV[12])
    end
    if ARGV[14] and ARGV[14] ~= '' then
      entry['alertId'] = ARGV[14]
    end
    redis.call('HSET', KEYS[2], group, cjson.encode(entry))
  end
  redis.call('PEXPIRE', KEYS[1], expire)
  -- (a no-op when nothing is buffered: PEXPIRE of a missing key does nothing)
  redis.call('PEXPIRE', KEYS[2], expire)
end

if ARGV[10] and ARGV[10] ~= '' then
  local due = tonumber(ARGV[10])
  if now >= due then
    return {2, now, now}
  end
  local hstart = tonumber(redis.call('HGET', KEYS[1], 'start'))
  if redis.call('ZADD', KEYS[3], 'NX', now, id) == 0 then
    -- a redelivered append: buffered already; schedule again if it opened the hold
    if hstart and redis.call('HGET', KEYS[1], 'opener') == id then
      return {1, hstart, now}
    end
    return {0, hstart or due, now}
  end
  redis.call('PEXPIRE', KEYS[3], (due - now) + keep)
  local hschedule = 0
  if hstart ~= due then
    redis.call('HSET', KEYS[1], 'start', due, 'opener', id)
    if ARGV[13] and ARGV[13] ~= '' then
      redis.call('HSET', KEYS[1], 'dest', ARGV[13])
    end
    hschedule = 1
  end
  buffer((due - now) + keep)
  return {hschedule, due, now}
end

local start = tonumber(redis.call('HGET', KEYS[1], 'start'))
-- How long an appended id is remembered after `minPeriod`: redeliveries come back within seconds or minutes.
local ID_MARGIN = 600000
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now - period - ID_MARGIN))
if redis.call('ZADD', KEYS[3], 'NX', now, id) == 0 then
  -- a redelivered firing: count nothing again
  if redis.call('HGET', KEYS[4], 'id') == id then
    return {2, now, now}
  end
  local schedule = 0
  if start and redis.call('HGET', KEYS[1], 'opener') == id then
    schedule = 1
  end
  return {schedule, start or now, now}
end
redis.call('PEXPIRE', KEYS[3], period + ID_MARGIN)

local schedule = 0
if not start then
  local last = tonumber(redis.call('HGET', KEYS[4], 'at'))
  if (not last) or now >= last + period then
    -- a quiet channel: this firing goes out at once and starts the channel's quiet period
    redis.call('DEL', KEYS[4])
    redis.call('HSET', KEYS[4], 'at', now, 'id', id)
    redis.call('PEXPIRE', KEYS[4], period)
    return {2, now, now}
  end
  -- the channel spoke less than `minPeriod` ago: open a window that is due `minPeriod` after that message
  start = last
  redis.call('HSET', KEYS[1], 'start', start, 'opener', id)
  schedule = 1
elseif now >= start + period + 60000 then
  schedule = 1
end

buffer(period + keep)
return {schedule, start, now}
