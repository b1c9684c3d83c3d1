-- digest_claim.lua: take-and-mark. Closes a due digest window and hands its buffer to exactly one flusher,
-- leaving a recoverable claimed record until digest_done.lua deletes it.
--
-- KEYS[1]  hash    `<ns>:{dg:<project>:<rule>:<channel>}:win`  (see digest_append.lua)
-- KEYS[2]  hash    `…:buf`
-- KEYS[3]  hash    `…:claim:<start>`  the claimed buffer of the window that started at <start>
-- KEYS[4]  string  `…:lease:<start>`  present while a flusher works on the claim
-- KEYS[5]  hash    `…:last`  the channel's last message (see digest_append.lua): a claimed digest is that message
-- ARGV[1]  now in ms, or '' to read the server's TIME
-- ARGV[2]  window start ms (from the flush message)
-- ARGV[3]  min period ms; 0 for a quiet window's hold (its `start` is its due time, and it is not the channel's
--          last message: `…:last` is left alone)
-- ARGV[4]  lease ms: how long a flusher may take to publish before another may recover the claim
-- ARGV[5]  keep ms: how long a claimed record survives if it is never completed
--
-- Returns one of
--   {'claimed', now_ms, more_fired, more_resolved, g_1, count_1, title_1, rep_1, open_1, silence_1, …}  the
--          caller publishes the digest (more_*: firings and resolves counted past the list's bound, `#mf` / `#mr`)
--          (rep '' = none; open: a resolved entry's open-for ms, -1 = none; silence: a NO_EVENTS silence's quiet
--          period ms, -1 = none or an entry of an earlier version);
--          also returned when a claimed record whose lease expired is recovered (a flusher crashed)
--   {'busy', ms}   another flusher holds the lease for ms more: try again later
--   {'early', ms}  the window is not due for ms more: try again later
--   {'gone'}       nothing to do: the window was flushed and completed (a duplicate flush message)
--
-- Complexity: O(groups) for the reply; the take itself is one RENAME.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

local function reply()
  local out = {'claimed', now, 0, 0}
  local flat = redis.call('HGETALL', KEYS[3])
  for i = 1, #flat, 2 do
    local field = flat[i]
    if field == '#mf' then
      out[3] = tonumber(flat[i + 1])
    elseif field == '#mr' then
      out[4] = tonumber(flat[i + 1])
    elseif string.sub(field, 1, 1) ~= '#' then
      -- an entry (the other `#` fields are digest_append.lua's counters)
      local e = cjson.decode(flat[i + 1])
      local rep = e['repetitionId']
      if rep == nil or rep == cjson.null then rep = '' end
      out[#out + 1] = field
      out[#out + 1] = tonumber(e['count'])
      out[#out + 1] = e['title']
      out[#out + 1] = rep
      local open = e['openForMs']
      if open == nil or open == cjson.null then open = -1 end
      out[#out + 1] = open
      local silence = e['silenceMs']
      if silence == nil or silence == cjson.null then silence = -1 end
      out[#out + 1] = silence
    end
  end
  return out
end

if redis.call('EXISTS', KEYS[3]) == 1 then
  local ttl = redis.call('PTTL', KEYS[4])
  if ttl > 0 then
    return {'busy', ttl}
  end
  redis.call('SET', KEYS[4], now, 'PX', ARGV[4])
  return reply()
end

local start = redis.call('HGET', KEYS[1], 'start')
if (not start) or start ~= ARGV[2] then
  return {'gone'}
end
local due = tonumber(start) + tonumber(ARGV[3])
if now < due then
  return {'early', due - now}
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'claimed', now, 0, 0}
end
redis.call('RENAME', KEYS[2], KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
-- The digest is the channel's newest message: firings of the next `minPeriod` wait for the next digest.
if tonumber(ARGV[3]) > 0 then
  redis.call('DEL', KEYS[5])
  redis.call('HSET', KEYS[5], 'at', now)
  redis.call('PEXPIRE', KEYS[5], ARGV[3])
end
redis.call('SET', KEYS[4], now, 'PX', ARGV[4])
return reply()
