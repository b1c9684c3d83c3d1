-- sliding_window.lua: a trailing window of `period` ms with a cooldown, decided atomically per
-- (rule, groupHash).
--
-- The hit that makes the count of events in (now - period, now] reach `threshold` fires; then the
-- (rule, group) does not fire again until `period` has passed since that firing.
-- Memory is bounded by the threshold, not by the event rate: the set never keeps more than `threshold`
-- members (the newest `threshold` are the ones that decide the answer), so a threshold <= 128 stays in
-- Redis's compact listpack encoding.
--
-- One call handles several (rule, group) pairs (two keys each), each with several hits, in order.
-- Needs Redis >= 6.2 (ZMSCORE).
--
-- KEYS[2j-1]  sorted set `<ns>:{<project>:<rule>:<group>}:sl`: member = the event's idempotency key (or a unique id
--             the client made up when the event has none), score = event time (ms). Expires `period` after
--             the last hit.
-- KEYS[2j]    cooldown hash `<ns>:{<project>:<rule>:<group>}:slc`: a = fired at (ms), c = count at the firing,
--             m = member of the firing hit. Expires when the cooldown ends.
-- ARGV[1]  now in ms, or '' to read the server's TIME
-- then, per pair j in order: threshold (>= 1), period ms (>= 1), n (hits), and n members
--
-- A member already in the set (a redelivered event) is not counted twice, and only a newly counted event
-- can fire. A member equal to the cooldown's `m` is the redelivery of the event that fired: answered FIRED
-- again with the same token.
--
-- Returns, per pair j in order: fired_at, fired_count, token, r_1, ..., r_n
--   fired_at     time (ms) of the firing whose cooldown is running, or -1
--   fired_count  count at that firing (0 when none)
--   token        the firing time (ms), or -1
--   r_i          -1 when hit i is the firing (first or redelivered), else the count in the trailing window
--                (saturates at `threshold`, since no more members are kept)
--
-- Complexity: O(n log(threshold + n)) for n hits, in a handful of Redis calls per pair (ZMSCORE, ZADD,
-- ZPOPMIN per 500 hits); memory O(threshold) per pair: the set never holds more than `threshold` members.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

-- Members per ZMSCORE/ZADD call: keeps `unpack` well inside Lua's stack limit.
local CHUNK = 500

local out = {}
local a = 2
for k = 1, #KEYS, 2 do
  local zkey = KEYS[k]
  local ckey = KEYS[k + 1]
  local threshold = tonumber(ARGV[a])
  local period = tonumber(ARGV[a + 1])
  local first = a + 3
  local last = first + tonumber(ARGV[a + 2]) - 1
  a = last + 1

  -- The trailing window is (now - period, now]: an event exactly `period` old no longer counts.
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now - period)
  local count = redis.call('ZCARD', zkey)

  local cd = redis.call('HMGET', ckey, 'a', 'c', 'm')
  local fired_at = tonumber(cd[1])
  local fired_count = tonumber(cd[2]) or 0
  local fired_m = cd[3]
  if fired_at ~= nil and now >= fired_at + period then
    -- The cooldown is over but the key has not expired yet (injected time): it no longer holds.
    fired_at, fired_count, fired_m = nil, 0, false
  end

  local head = #out + 1
  out[head], out[head + 1], out[head + 2] = -1, 0, -1
  -- Which members are already counted, in one call per chunk (ZMSCORE), instead of one ZADD per hit:
  -- Lua's per-call overhead dominates a hot key's cost.
  -- Members the client made up for hits without an event id (`~` + 64 random bits) are new by construction:
  -- only event ids are looked up.
  local known = {}
  local lookup = {}
  for i = first, last do
    if string.byte(ARGV[i], 1) ~= 126 then -- '~'
      lookup[#lookup + 1] = ARGV[i]
    end
  end
  for c = 1, #lookup, CHUNK do
    local c_last = math.min(c + CHUNK - 1, #lookup)
    local scores = redis.call('ZMSCORE', zkey, unpack(lookup, c, c_last))
    for i = c, c_last do
      if scores[i - c + 1] then
        known[lookup[i]] = true
      end
    end
  end
  local added = {}
  local fired_now = false
  for i = first, last do
    local m = ARGV[i]
    if fired_at ~= nil and m == fired_m then
      out[#out + 1] = -1
    else
      local is_new = not known[m]
      if is_new then
        known[m] = true
        added[#added + 1] = m
        count = count + 1
      end
      -- Only the newest `threshold` members are kept, so the count saturates there.
      local kept = math.min(count, threshold)
      if is_new and fired_at == nil and kept >= threshold then
        fired_at, fired_count, fired_m = now, kept, m
        fired_now = true
        out[#out + 1] = -1
      else
        out[#out + 1] = kept
      end
    end
  end

  -- Keep the newest `threshold` members: drop the oldest first and add only the new members that stay, so
  -- the set never grows past `threshold` (it would leave the compact encoding for good).
  local n_new = #added
  local keep_from = math.max(1, n_new - threshold + 1)
  local excess = (count - n_new) + (n_new - keep_from + 1) - threshold
  if excess > 0 then
    redis.call('ZPOPMIN', zkey, excess)
  end
  for c = keep_from, n_new, CHUNK do
    local pairs_ = {}
    for i = c, math.min(c + CHUNK - 1, n_new) do
      pairs_[#pairs_ + 1] = now
      pairs_[#pairs_ + 1] = added[i]
    end
    redis.call('ZADD', zkey, unpack(pairs_))
  end
  if #added > 0 then
    redis.call('PEXPIRE', zkey, period)
  end
  if fired_now then
    redis.call('DEL', ckey)
    redis.call('HSET', ckey, 'a', fired_at, 'c', fired_count, 'm', fired_m)
    redis.call('PEXPIRE', ckey, period)
  end
  if fired_at ~= nil then
    out[head], out[head + 1], out[head + 2] = fired_at, fired_count, fired_at
  end
end
return out
