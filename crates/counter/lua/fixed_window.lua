-- fixed_window.lua: Hawk's fixed window, decided atomically per (rule, groupHash).
--
-- The window starts at the first counted event and lasts `period` ms. The hit whose count makes the window's
-- count EQUAL `threshold` fires, once per window: the firing is recorded in the key, so a later threshold
-- change (lower, or higher again) cannot make the same window fire twice.
--
-- One call handles several keys (the client packs the keys of one batch that share a node/slot), each with
-- several hits (hits of one key in one batch are coalesced), so a batch costs one script call, not one per
-- event. Keys that share a (threshold, period) come in one group, so those two numbers travel once per group.
--
-- KEYS[j]  window hash `<ns>:{<project>:<rule>:<group>}:fx`, fields:
--            s  window start (ms)         c  count in this window
--            f  fired at (ms, absent until the window fires)
--            fc count at the firing       fe event id of the firing hit ('' when it had none)
--            n  how many `i:` fields the hash holds
--            i:<event id>  the count that event was counted at: the window's recent event ids
--          It expires (PEXPIRE) when the window ends; nothing is kept longer.
-- ARGV[1]  now in ms, or '' to read the server's TIME (one clock for the fleet)
-- ARGV[2]  event ids a window must remember (>= 1): the most recent ARGV[2] counted ids are always kept, and
--          at most 2 × ARGV[2] are held
-- then, per group: threshold (>= 1), period ms (>= 1), m (keys in the group: the next m KEYS, in order), and
-- per key of the group: n (hits) and n event ids ('' = none), or -n for n hits none of which has an id
--
-- A hit whose event id the window has already counted (a redelivered batch: the worker crashed, or Redis ran
-- the script but the reply was lost) is not counted again: answered with the count it got the first time, or
-- FIRED with the same token when it was the firing hit (the worker crashed before publishing). Hits without
-- an event id are counted at least once: a redelivered one counts twice.
--
-- Returns, per key j in order: fired_at, fired_count, token, r_1, ..., r_n
--   fired_at     firing time (ms) of this window, or -1 when the window has not fired
--   fired_count  count at the firing (0 when not fired)
--   token        the window start (ms): identifies the firing inside its (rule, group)
--   r_i          -1 when hit i is the firing (first or redelivered), else its count in the window
-- except for a key whose hits carry no ids on the server's clock (ARGV[1] = '', the key's n sent as -n): there
-- the hits' counts follow from the count after the call, so the reply is shorter:
--   count                         when no hit fired (hit i's count is count - n + i), or
--   -count, fired_at, token       when the hit whose count equals the threshold fired (that hit is -1 above)
--
-- Cost: without ids on the server's clock, one HINCRBY per key (an HSET and a PEXPIRE more when the window
-- opens, an HMGET and an HSET when it crosses) and a one-integer reply. Otherwise one HMGET (the window and the
-- hits' ids at once) and one HSET per key, plus a PEXPIRE when the window opens; the hash is compacted (one HGETALL, one HDEL) once every ARGV[2] new ids, amortised O(1) per
-- id. The window and its ids are one key, so the common cases (a new key, or a hot key's next batch) never
-- touch a second one. Memory O(1) per window plus at most 2 × ARGV[2] ids.
local now
-- true when `now` is the server's clock, the clock key expiry runs on
local clock = ARGV[1] == ''
if clock then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

-- Fields per HMGET/HSET/HDEL call: keeps `unpack` well inside Lua's stack limit.
local CHUNK = 500
local max_ids = tonumber(ARGV[2])

-- Reads the window's fields and the given ids' fields; returns the window's fields and the known ids.
local function read(key, first, last)
  local fields = {'s', 'c', 'f', 'fc', 'fe', 'n'}
  local ids = {}
  for i = first, last do
    local id = ARGV[i]
    if id ~= '' then
      ids[#ids + 1] = id
    end
  end
  local known = {}
  local w
  for c = 0, math.max(#ids - 1, 0), CHUNK do
    local part = c == 0 and fields or {}
    local base = #part
    local upto = math.min(c + CHUNK, #ids)
    for i = c + 1, upto do
      part[base + i - c] = 'i:' .. ids[i]
    end
    local got = redis.call('HMGET', key, unpack(part))
    if c == 0 then
      w = got
    end
    for i = c + 1, upto do
      local sc = got[base + i - c]
      if sc then
        known[ids[i]] = tonumber(sc)
      end
    end
  end
  return w, known
end

-- Keeps the `max_ids` most recent ids of a window whose hash holds `held` of them; returns how many remain.
local function compact(key)
  local all = redis.call('HGETALL', key)
  local counts = {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'i:' then
      counts[#counts + 1] = tonumber(all[i + 1])
    end
  end
  if #counts <= max_ids then
    return #counts
  end
  -- ids get distinct counts in a window, so the max_ids-th largest count splits old from recent exactly
  table.sort(counts, function(x, y) return x > y end)
  local oldest_kept = counts[max_ids]
  local drop = {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'i:' and tonumber(all[i + 1]) < oldest_kept then
      drop[#drop + 1] = all[i]
    end
  end
  for c = 1, #drop, CHUNK do
    redis.call('HDEL', key, unpack(drop, c, math.min(c + CHUNK - 1, #drop)))
  end
  return #counts - #drop
end

local out = {}
local a = 3
local k = 0
while a <= #ARGV do
  local threshold = tonumber(ARGV[a])
  local period = tonumber(ARGV[a + 1])
  local m = tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, m do
    k = k + 1
    local key = KEYS[k]
    local n = tonumber(ARGV[a])
    local first, last
    if n < 0 then
      -- -n hits, none with an event id: no ids follow
      n = -n
      first, last = a + 1, a
    else
      first, last = a + 1, a + n
    end
    a = last + 1

    if clock and last < first then
      -- The common case, no event ids and the server's clock: one HINCRBY. A live key is a live window (it
      -- expires when its window ends, on the same clock), and only a call whose hits cross `threshold` needs
      -- the rest of the window.
      local count = redis.call('HINCRBY', key, 'c', n)
      local before = count - n
      local head = #out + 1
      local fires = before < threshold and count >= threshold
      local start = now
      if before == 0 then
        -- a new window: the key did not exist
        if fires then
          redis.call('HSET', key, 's', now, 'f', now, 'fc', threshold, 'fe', '')
        else
          redis.call('HSET', key, 's', now)
        end
        redis.call('PEXPIRE', key, period)
      elseif fires then
        -- this call crosses the threshold: it fires unless the window has fired already (at another threshold)
        local w = redis.call('HMGET', key, 's', 'f')
        start = tonumber(w[1]) or now
        if w[2] then
          fires = false
        else
          redis.call('HSET', key, 'f', now, 'fc', threshold, 'fe', '')
        end
      end
      -- the short reply: the hits' counts follow from `count`
      if fires then
        out[head], out[head + 1], out[head + 2] = -count, now, start
      else
        out[head] = count
      end
    else
      local w, known = read(key, first, last)
      local start = tonumber(w[1])
      local count = tonumber(w[2]) or 0
      local fired_at = tonumber(w[3])
      local fired_count = tonumber(w[4]) or 0
      local fired_id = w[5]
      local held = tonumber(w[6]) or 0

      local fresh = false
      if start == nil or now >= start + period then
        -- No window, or one that has ended but not expired yet (injected time, or a clock step): start anew.
        if start ~= nil then
          redis.call('DEL', key)
        end
        start, count, fired_at, fired_count, fired_id, held = now, 0, nil, 0, false, 0
        known = {}
        fresh = true
      end

      local head = #out + 1
      out[head], out[head + 1], out[head + 2] = -1, 0, start
      local counted = false
      local fired_now = false
      local writes = {}
      for i = first, first + n - 1 do
        local id = i <= last and ARGV[i] or ''
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
            writes[#writes + 1] = 'i:' .. id
            writes[#writes + 1] = count
            held = held + 1
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

      if counted then
        writes[#writes + 1] = 'c'
        writes[#writes + 1] = count
        writes[#writes + 1] = 'n'
        writes[#writes + 1] = held
        if fresh then
          writes[#writes + 1] = 's'
          writes[#writes + 1] = start
        end
        if fired_now then
          writes[#writes + 1] = 'f'
          writes[#writes + 1] = fired_at
          writes[#writes + 1] = 'fc'
          writes[#writes + 1] = fired_count
          writes[#writes + 1] = 'fe'
          writes[#writes + 1] = fired_id
        end
        for c = 1, #writes, 2 * CHUNK do
          redis.call('HSET', key, unpack(writes, c, math.min(c + 2 * CHUNK - 1, #writes)))
        end
        if fresh then
          redis.call('PEXPIRE', key, period)
        end
        if held > 2 * max_ids then
          redis.call('HSET', key, 'n', compact(key))
        end
      end
      if fired_at ~= nil then
        out[head], out[head + 1] = fired_at, fired_count
      end
    end
  end
end
return out
