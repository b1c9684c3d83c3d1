-- spike.lua: SPIKE, decided atomically per (rule, groupHash): the hit whose count in the current bucket reaches
-- max(threshold, factor × baseline) fires, once per bucket, where the baseline is the mean count of the previous
-- `windows` buckets (empty buckets count as 0; a group younger than that uses the buckets since its first one; in
-- its first bucket it has no baseline and never fires). Buckets are aligned on the epoch: bucket = floor(now /
-- period). The group's first bucket is the one of its first event, or of its first after the key expired. A hit
-- whose clock is behind the group's newest bucket (a clock stepping back) is counted in that newest bucket.
--
-- One call handles several keys (the client packs the keys of one batch that share a node/slot), each with
-- several hits (hits of one key in one batch are coalesced).
--
-- KEYS[2j-1]  hash `<ns>:{<project>:<rule>:<group>}:sp`, fields (the first ten written first, in this order, so
--             that they lead the hash):
--            k   "<period>:<windows>:q" the key was written with (another value: the rule changed, start afresh)
--            o   the group's first bucket
--            b   the group's newest bucket (the current one), c its count
--            s   the baseline sum: the sum of the counts the queue holds (the completed buckets among the
--                `windows` before b; bucket b itself is not in it)
--            n   how many event ids KEYS[2j] holds (all of bucket b)
--            f   bucket b's firing, "<bucket>|<at ms>|<count>|<baseline sum>|<baseline buckets>|<event id>"
--                ('' before any; a firing of an older bucket is ignored)
--            h, t  the queue's head and tail sequence numbers (entries t .. h-1 are held), tb the tail's bucket
--            <i> for i in 0..windows-1: the queue entry of sequence number i (mod windows), "<bucket>:<count>":
--                the completed buckets with a count, oldest first; an entry outside t .. h-1 is stale
--          It expires (PEXPIRE) at the end of bucket b + windows: the last bucket whose baseline holds bucket b
--          (so between windows and windows + 1 buckets after the group's last event), set when b changes.
-- KEYS[2j]  hash `<ns>:{<project>:<rule>:<group>}:spi`: event id → the count it was counted at, in bucket b;
--          deleted when b changes, expires at the end of bucket b.
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
-- Complexity, per key: O(1) amortised, whatever `windows`. A hit in the current bucket is one HMGET of 7 fields
-- and one HSET (plus an HMGET of its ids and an HSET of them in the ids key when it has ids). Moving to a later
-- bucket reads the queue's head and tail (one HMGET), pops the entries that left the baseline (one HGET each,
-- and one more that stays; each bucket is pushed once and popped once), pushes bucket b, deletes the ids key
-- and sets the expiry; a gap of more than `windows` buckets drops the whole queue at once (t = h, s = 0). The
-- ids are compacted (HGETALL, HDEL of the ids key only) once every ARGV[2] new ones. Memory: the 11 fields and
-- at most `windows` queue entries per (rule, group), plus at most 2 × ARGV[2] ids of the current bucket.
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

-- Deletes the ids counted at `upto` or below; returns how many remain.
local function drop_ids(key, upto)
  local all = redis.call('HGETALL', key)
  local drop, kept = {}, 0
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) <= upto then
      drop[#drop + 1] = all[i]
    else
      kept = kept + 1
    end
  end
  for c = 1, #drop, CHUNK do
    redis.call('HDEL', key, unpack(drop, c, math.min(c + CHUNK - 1, #drop)))
  end
  return kept
end

-- "<bucket>:<count>" → bucket, count
local function entry(v)
  local sep = string.find(v, ':', 1, true)
  return tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
end

local out = {}
local a = 3
for k = 1, #KEYS, 2 do
  local key, idkey = KEYS[k], KEYS[k + 1]
  local period = tonumber(ARGV[a])
  local windows = tonumber(ARGV[a + 1])
  local factor = tonumber(ARGV[a + 2])
  local threshold = tonumber(ARGV[a + 3])
  local n = tonumber(ARGV[a + 4])
  local first, last = a + 5, a + 4 + n
  a = last + 1

  -- (from the argument strings: formatting numbers costs more than the rest of a hit)
  local shape = ARGV[a - n - 5] .. ':' .. ARGV[a - n - 4] .. ':q'
  local bucket = math.floor(now / period)
  local w = redis.call('HMGET', key, 'k', 'o', 'b', 'c', 's', 'n', 'f')
  local fresh = w[1] ~= shape
  if fresh and w[1] then
    -- the rule's bucket or baseline changed: its buckets mean nothing now
    redis.call('DEL', key, idkey)
  end
  local origin, b, count, sum, held, firing = bucket, bucket, 0, 0, 0, ''
  if not fresh then
    origin, b, count = tonumber(w[2]), tonumber(w[3]), tonumber(w[4])
    sum, held, firing = tonumber(w[5]), tonumber(w[6]), w[7] or ''
  end
  local cur = math.max(bucket, b)
  local writes = {}
  local expire = fresh

  if cur > b then
    -- a later bucket: bucket b completes and joins the queue, the buckets before cur - windows leave it
    local q = redis.call('HMGET', key, 'h', 't', 'tb')
    local h, t, tb = tonumber(q[1]), tonumber(q[2]), tonumber(q[3])
    local lo = cur - windows
    if b < lo then
      -- more than `windows` buckets since the last event: nothing held is in the baseline
      t, sum = h, 0
    else
      if t < h and tb < lo then
        repeat
          local eb, ec = entry(redis.call('HGET', key, t % windows))
          if eb >= lo then
            tb = eb
            break
          end
          sum = sum - ec
          t = t + 1
        until t == h
      end
      if t == h then
        tb = b
      end
      writes[#writes + 1] = h % windows
      writes[#writes + 1] = b .. ':' .. count
      h, sum = h + 1, sum + count
    end
    for _, v in ipairs({'h', h, 't', t, 'tb', tb}) do
      writes[#writes + 1] = v
    end
    if held > 0 then
      redis.call('DEL', idkey)
      held = 0
    end
    b, count, expire = cur, 0, true
  end

  local from = math.max(cur - windows, origin)
  local buckets = cur - from
  -- no baseline, no spike: nothing reaches an infinite count
  local needed = math.huge
  if buckets > 0 then
    needed = math.max(threshold, ceil_div(factor * sum, 1000 * buckets))
  end

  local fired_at, fired_count, fired_id, fired_sum, fired_buckets = nil, 0, false, 0, 0
  local prefix = firing ~= '' and cur .. '|'
  if prefix and string.sub(firing, 1, #prefix) == prefix then
    local p = {}
    local at = #prefix + 1
    for _ = 1, 4 do
      local sep = string.find(firing, '|', at, true)
      p[#p + 1] = tonumber(string.sub(firing, at, sep - 1))
      at = sep + 1
    end
    fired_at, fired_count, fired_sum, fired_buckets = p[1], p[2], p[3], p[4]
    fired_id = string.sub(firing, at)
  end

  -- the hits' ids already counted in this bucket
  local known = {}
  if held > 0 then
    local ids = {}
    for i = first, last do
      if ARGV[i] ~= '' then
        ids[#ids + 1] = ARGV[i]
      end
    end
    for c = 1, #ids, CHUNK do
      local upto = math.min(c + CHUNK - 1, #ids)
      local got = redis.call('HMGET', idkey, unpack(ids, c, upto))
      for i = c, upto do
        if got[i - c + 1] then
          known[ids[i]] = tonumber(got[i - c + 1])
        end
      end
    end
  end

  local head = #out + 1
  out[head], out[head + 1], out[head + 2], out[head + 3], out[head + 4] = -1, 0, cur * period, sum, buckets
  local counted, fired_now = false, false
  local idwrites = {}
  local held_before = held
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
        idwrites[#idwrites + 1] = id
        idwrites[#idwrites + 1] = count
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

  if counted or expire then
    if fresh then
      -- the leading fields, in the order HMGET asks for them
      for _, v in ipairs({'k', shape, 'o', origin, 'b', b, 'c', count, 's', sum, 'n', held, 'f', '',
                          'h', 0, 't', 0, 'tb', b}) do
        writes[#writes + 1] = v
      end
    elseif expire then
      for _, v in ipairs({'b', b, 'c', count, 's', sum, 'n', held}) do
        writes[#writes + 1] = v
      end
    else
      -- the common case: one more hit in the current bucket
      writes[#writes + 1] = 'c'
      writes[#writes + 1] = count
      if held ~= held_before then
        writes[#writes + 1] = 'n'
        writes[#writes + 1] = held
      end
    end
    if fired_now then
      writes[#writes + 1] = 'f'
      writes[#writes + 1] = table.concat({cur, fired_at, fired_count, fired_sum, fired_buckets, fired_id}, '|')
    end
    redis.call('HSET', key, unpack(writes))
    if expire then
      redis.call('PEXPIRE', key, (cur + windows + 1) * period - now)
    end
    for c = 1, #idwrites, 2 * CHUNK do
      redis.call('HSET', idkey, unpack(idwrites, c, math.min(c + 2 * CHUNK - 1, #idwrites)))
    end
    if held_before == 0 and held > 0 then
      redis.call('PEXPIRE', idkey, (cur + 1) * period - now)
    end
    if held > 2 * max_ids then
      redis.call('HSET', key, 'n', drop_ids(idkey, count - max_ids))
    end
  end
  if fired_at ~= nil then
    out[head], out[head + 1], out[head + 3], out[head + 4] = fired_at, fired_count, fired_sum, fired_buckets
  end
end
return out
