-- spike.lua: SPIKE, decided atomically per (rule, groupHash): the hit whose count in the current bucket reaches
-- max(threshold, factor × baseline) fires, once per bucket, where the baseline is the mean count of the previous
-- `windows` buckets (empty buckets count as 0; a group younger than that uses the buckets since its first one; in
-- its first bucket it has no baseline and never fires). Buckets are aligned on the epoch: bucket = floor(now /
-- period). The group's first bucket is the one of its first event, or of its first after the key expired.
--
-- One call handles several keys (the client packs the keys of one batch that share a node/slot), each with
-- several hits (hits of one key in one batch are coalesced).
--
-- KEYS[j]  hash `<ns>:{<project>:<rule>:<group>}:sp`, fields:
--            k  "<period>:<windows>" the key was written with (another value: the rule changed, start afresh)
--            o  the group's first bucket
--            r<i>  for i in 0..windows: "<bucket>:<count>", the ring of the last windows+1 buckets (slot bucket %
--                  (windows+1)); a slot whose bucket is outside the baseline is ignored
--            f  the last bucket that fired, fa its firing time (ms), fc the count at the firing,
--            fe the event id of the firing hit ('' when none), fs the baseline sum and fw the baseline buckets then
--            ib the bucket the `i:` fields belong to, n how many `i:` fields the hash holds
--            i:<event id>  the count that event was counted at in bucket ib
--          It expires (PEXPIRE) (windows + 1) × period after its last write: by then every bucket it holds is out
--          of any baseline.
-- ARGV[1]  now in ms, or '' to read the server's TIME (one clock for the fleet)
-- ARGV[2]  event ids a bucket must remember (>= 1): the most recent ARGV[2] are always kept, at most 2 × ARGV[2]
-- then, per key j in order: period ms (>= 1), windows (>= 1), factor in thousandths (>= 1), threshold (>= 1),
--          n (hits) and n event ids ('' = none)
--
-- A hit whose event id the bucket has already counted (a redelivered batch) is not counted again: answered with
-- the count it got the first time, or FIRED with the same token when it was the firing hit. Hits without an event
-- id are counted at least once.
--
-- Returns, per key j in order: fired_at, fired_count, token, baseline_sum, baseline_buckets, r_1, ..., r_n
--   fired_at          when the current bucket fired (ms), or -1
--   fired_count       the count at the firing (0 when not fired)
--   token             the bucket's start (ms): identifies the firing inside its (rule, group)
--   baseline_sum      the sum of the baseline buckets' counts (at the firing, when fired)
--   baseline_buckets  how many buckets the baseline has (at the firing, when fired)
--   r_i               -1 when hit i is the firing (first or redelivered), else its count in the bucket
--
-- Complexity: per key, one HMGET of windows + 11 fields and the hits' ids, one HSET, one PEXPIRE: O(windows + n).
-- When the bucket changes, the previous bucket's ids are deleted (HGETALL + HDEL, amortised O(1) per id), and the
-- ids are compacted once every ARGV[2] new ones. Memory O(windows) per (rule, group) plus at most 2 × ARGV[2] ids.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local max_ids = tonumber(ARGV[2])
local CHUNK = 500

-- ceil(a / b) for whole a >= 0, b >= 1, exact while the products stay below 2^53
local function ceil_div(a, b)
  local q = math.floor(a / b)
  while q * b > a do q = q - 1 end
  while q * b < a do q = q + 1 end
  return q
end

-- Deletes the `i:` fields whose count is at most `upto` (all of them when upto is nil); returns how many remain.
local function drop_ids(key, upto)
  local all = redis.call('HGETALL', key)
  local drop, kept = {}, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'i:' then
      if upto == nil or tonumber(all[i + 1]) <= upto then
        drop[#drop + 1] = all[i]
      else
        kept = kept + 1
      end
    end
  end
  for c = 1, #drop, CHUNK do
    redis.call('HDEL', key, unpack(drop, c, math.min(c + CHUNK - 1, #drop)))
  end
  return kept
end

local out = {}
local a = 3
for k = 1, #KEYS do
  local key = KEYS[k]
  local period = tonumber(ARGV[a])
  local windows = tonumber(ARGV[a + 1])
  local factor = tonumber(ARGV[a + 2])
  local threshold = tonumber(ARGV[a + 3])
  local n = tonumber(ARGV[a + 4])
  local first, last = a + 5, a + 4 + n
  a = last + 1

  local shape = period .. ':' .. windows
  local cur = math.floor(now / period)
  local fields = {'k', 'o', 'f', 'fa', 'fc', 'fe', 'fs', 'fw', 'ib', 'n'}
  for i = 0, windows do
    fields[#fields + 1] = 'r' .. i
  end
  local w = redis.call('HMGET', key, unpack(fields))
  if w[1] and w[1] ~= shape then
    -- the rule's bucket or baseline changed: its buckets mean nothing now
    redis.call('DEL', key)
    w = {}
  end
  local origin = tonumber(w[2]) or cur
  local fired_at, fired_count, fired_id, fired_sum, fired_buckets = nil, 0, false, 0, 0
  if tonumber(w[3]) == cur then
    fired_at, fired_count, fired_id = tonumber(w[4]), tonumber(w[5]) or 0, w[6]
    fired_sum, fired_buckets = tonumber(w[7]) or 0, tonumber(w[8]) or 0
  end
  local held = tonumber(w[10]) or 0
  local fresh_ids = tonumber(w[9]) ~= cur

  -- the baseline: previous buckets, not before the group's first one
  local from = math.max(cur - windows, origin)
  local sum, count = 0, 0
  for i = 0, windows do
    local v = w[11 + i]
    if v then
      local sep = string.find(v, ':', 1, true)
      local b, c = tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
      if b == cur then
        count = c
      elseif b >= from and b < cur then
        sum = sum + c
      end
    end
  end
  local buckets = math.max(cur - from, 0)
  -- no baseline, no spike: nothing reaches an infinite count
  local needed = math.huge
  if buckets > 0 then
    needed = math.max(threshold, ceil_div(factor * sum, 1000 * buckets))
  end

  -- the hits' ids already counted in this bucket
  local known = {}
  if fresh_ids then
    if held > 0 then
      drop_ids(key, nil)
    end
    held = 0
  else
    local ids = {}
    for i = first, last do
      if ARGV[i] ~= '' then
        ids[#ids + 1] = 'i:' .. ARGV[i]
      end
    end
    for c = 1, #ids, CHUNK do
      local upto = math.min(c + CHUNK - 1, #ids)
      local got = redis.call('HMGET', key, unpack(ids, c, upto))
      for i = c, upto do
        if got[i - c + 1] then
          known[string.sub(ids[i], 3)] = tonumber(got[i - c + 1])
        end
      end
    end
  end

  local head = #out + 1
  out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = -1, 0, cur * period, sum, buckets
  local counted, fired_now = false, false
  local writes = {}
  for i = first, last do
    local id = ARGV[i]
    if fired_at ~= nil and id ~= '' and id == fired_id then
      out[#out + 1] = -1
    elseif id ~= '' and known[id] then
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
      if fired_at == nil and count >= needed then
        fired_at, fired_count, fired_id, fired_sum, fired_buckets = now, count, id, sum, buckets
        fired_now = true
        out[#out + 1] = -1
      else
        out[#out + 1] = count
      end
    end
  end

  if counted then
    local slot = cur % (windows + 1)
    local tail = {'k', shape, 'o', origin, 'ib', cur, 'n', held, 'r' .. slot, cur .. ':' .. count}
    for _, v in ipairs(tail) do
      writes[#writes + 1] = v
    end
    if fired_now then
      local f = {'f', cur, 'fa', fired_at, 'fc', fired_count, 'fe', fired_id, 'fs', fired_sum, 'fw', fired_buckets}
      for _, v in ipairs(f) do
        writes[#writes + 1] = v
      end
    end
    for c = 1, #writes, 2 * CHUNK do
      redis.call('HSET', key, unpack(writes, c, math.min(c + 2 * CHUNK - 1, #writes)))
    end
    redis.call('PEXPIRE', key, (windows + 1) * period)
    if held > 2 * max_ids then
      redis.call('HSET', key, 'n', drop_ids(key, count - max_ids))
    end
  end
  if fired_at ~= nil then
    out[head], out[head + 1], out[head + 3], out[head + 4] = fired_at, fired_count, fired_sum, fired_buckets
  end
end
return out
