-- fixed_window.lua: Hawk's fixed window, decided atomically per (rule, groupHash).
--
-- The window starts at the first counted event and lasts `period` ms. The hit whose count makes the window's
-- count EQUAL `threshold` fires, once per window: the firing is recorded in the key, so a later threshold
-- change (lower, or higher again) cannot make the same window fire twice.
--
-- One call handles several keys (the client packs the keys of one batch that share a node/slot), each with
-- several hits (hits of one key in one batch are coalesced), so a batch costs one script call, not one per
-- event.
--
-- KEYS[2j-1]  window hash `<ns>:{<project>:<rule>:<group>}:fx`, fields:
--            s  window start (ms)         c  count in this window
--            f  fired at (ms, absent until the window fires)
--            fc count at the firing       fe event id of the firing hit ('' when it had none)
--          It expires (PEXPIRE) when the window ends; nothing is kept longer.
-- KEYS[2j]    sorted set `…:fxi`: the window's most recent counted event ids (member = id, score = the count it
--             was counted at), at most ARGV[2] of them; expires with the window.
-- ARGV[1]  now in ms, or '' to read the server's TIME (one clock for the fleet)
-- ARGV[2]  most event ids remembered per window (>= 1)
-- then, per key j in order: threshold (>= 1), period ms (>= 1), n (hits), and n event ids ('' = none)
--
-- A hit whose event id the window has already counted (a redelivered batch: the worker crashed, or Redis ran
-- the script but the reply was lost) is not counted again: answered with the count it got the first time, or
-- FIRED with the same token when it was the firing hit (the worker crashed before publishing). Only the most
-- recent ARGV[2] ids are remembered, which covers a redelivered batch. Hits without an event id are counted at
-- least once: a redelivered one counts twice.
--
-- Returns, per key j in order: fired_at, fired_count, token, r_1, ..., r_n
--   fired_at     firing time (ms) of this window, or -1 when the window has not fired
--   fired_count  count at the firing (0 when not fired)
--   token        the window start (ms): identifies the firing inside its (rule, group)
--   r_i          -1 when hit i is the firing (first or redelivered), else its count in the window
--
-- Complexity: O(total hits · log ids); memory O(1) per window plus at most ARGV[2] ids.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

-- Ids per ZMSCORE/ZADD call: keeps `unpack` well inside Lua's stack limit.
local CHUNK = 500
local max_ids = tonumber(ARGV[2])

local out = {}
local a = 3
for k = 1, #KEYS, 2 do
  local key = KEYS[k]
  local ikey = KEYS[k + 1]
  local threshold = tonumber(ARGV[a])
  local period = tonumber(ARGV[a + 1])
  local first = a + 3
  local last = first + tonumber(ARGV[a + 2]) - 1
  a = last + 1

  local w = redis.call('HMGET', key, 's', 'c', 'f', 'fc', 'fe')
  local start = tonumber(w[1])
  local count = tonumber(w[2]) or 0
  local fired_at = tonumber(w[3])
  local fired_count = tonumber(w[4]) or 0
  local fired_id = w[5]

  local fresh = false
  if start == nil or now >= start + period then
    -- No window, or one that has ended but not expired yet (injected time, or a clock step): start anew.
    if start ~= nil then
      redis.call('DEL', key, ikey)
    end
    start, count, fired_at, fired_count, fired_id = now, 0, nil, 0, false
    fresh = true
  end

  -- the ids this window has already counted (none in a fresh window)
  local known = {}
  if not fresh then
    local ids = {}
    for i = first, last do
      if ARGV[i] ~= '' then ids[#ids + 1] = ARGV[i] end
    end
    for c = 1, #ids, CHUNK do
      local part = {unpack(ids, c, math.min(c + CHUNK - 1, #ids))}
      local scores = redis.call('ZMSCORE', ikey, unpack(part))
      for i, sc in ipairs(scores) do
        if sc then known[part[i]] = tonumber(sc) end
      end
    end
  end

  local head = #out + 1
  out[head], out[head + 1], out[head + 2] = -1, 0, start
  local counted = false
  local fired_now = false
  local added = {}
  for i = first, last do
    local id = ARGV[i]
    if fired_at ~= nil and id ~= '' and id == fired_id then
      out[#out + 1] = -1
    elseif id ~= '' and known[id] then
      -- counted before (a redelivery): not again
      out[#out + 1] = known[id]
    else
      count = count + 1
      counted = true
      if id ~= '' then
        known[id] = count
        added[#added + 1] = count
        added[#added + 1] = id
      end
      if fired_at == nil and count == threshold then
        fired_at, fired_count, fired_id = now, count, id
        fired_now = true
        out[#out + 1] = -1
      else
        out[#out + 1] = count
      end
    end
  end
  if #added > 0 then
    for c = 1, #added, 2 * CHUNK do
      redis.call('ZADD', ikey, unpack(added, c, math.min(c + 2 * CHUNK - 1, #added)))
    end
    local excess = redis.call('ZCARD', ikey) - max_ids
    if excess > 0 then
      redis.call('ZREMRANGEBYRANK', ikey, 0, excess - 1)
    end
    -- the ids live as long as their window
    redis.call('PEXPIRE', ikey, math.max(1, start + period - now))
  end

  if fired_now then
    redis.call('HSET', key, 's', start, 'c', count, 'f', fired_at, 'fc', fired_count, 'fe', fired_id)
  elseif counted then
    if fresh then
      redis.call('HSET', key, 's', start, 'c', count)
    else
      redis.call('HSET', key, 'c', count)
    end
  end
  if fresh then
    redis.call('PEXPIRE', key, period)
  end
  if fired_at ~= nil then
    out[head], out[head + 1] = fired_at, fired_count
  end
end
return out
