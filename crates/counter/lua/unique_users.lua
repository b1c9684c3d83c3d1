-- unique_users.lua: "affected more than N users": distinct users of a (rule, groupHash) in a fixed or a
-- sliding window, decided atomically, exactly (no sketch), with memory bounded by the threshold.
--
-- fixed:   the window starts at the first counted event (the first with a user) and lasts `period` ms; the
--          hit that brings the number of distinct users to `threshold` fires, once per window. Once it fired
--          the users are dropped (nothing can fire again in that window), so the set never holds more than
--          `threshold - 1` users.
-- sliding: the hit that leaves `threshold` distinct users seen in (now - period, now] fires; then the
--          (rule, group) does not fire again until `period` has passed since that firing. The set keeps the
--          `threshold` users seen most recently (score = last seen): enough to answer "are there `threshold`
--          users in the trailing window" exactly, since any user seen in the window but dropped is older than
--          every kept one.
-- A hit without a user ('') is not counted: it is answered with the current count and changes nothing.
--
-- One call handles several (rule, group) pairs (two keys each) of one mode, each with several hits, in order.
--
-- KEYS[2j-1]  sorted set `<ns>:{<project>:<rule>:<group>}:uf` (fixed) or `…:us` (sliding): member = user id (the client
--             digests long ones), score = first seen (fixed) or last seen (sliding), ms.
-- KEYS[2j]    hash `<ns>:{<project>:<rule>:<group>}:ufm` / `…:usm`:
--               fixed:   s = window start, f = fired at, fc = users at the firing, fe = event id of the firing
--               sliding: a = fired at, c = users at the firing, e = event id of the firing (the cooldown)
--             Both keys expire when the window (fixed) or the trailing period / cooldown (sliding) ends.
-- ARGV[1]  now in ms, or '' to read the server's TIME (one clock for the fleet)
-- ARGV[2]  'fixed' or 'sliding'
-- then, per pair j in order: threshold (>= 1), period ms (>= 1), n (hits), and n pairs: user, event id
--          ('' = no user / no event id)
--
-- A hit whose event id equals the stored firing's is the redelivery of the event that fired (the worker
-- crashed before publishing): answered FIRED again with the same token. A redelivered event never adds a
-- user twice (a set), so counting is exactly-once with or without event ids.
--
-- Returns, per pair j in order: fired_at, fired_count, token, r_1, ..., r_n
--   fired_at     firing time (ms) of this window / running cooldown, or -1
--   fired_count  distinct users at that firing (0 when none)
--   token        fixed: the window start (ms, -1 before the first user); sliding: the firing time, or -1
--   r_i          -1 when hit i is the firing (first or redelivered), else the distinct users counted
--                (sliding: saturates at `threshold`)
--
-- Complexity: O(n log(threshold)) for n hits. Sliding: a handful of Redis calls per pair (ZMSCORE, ZADD,
-- ZPOPMIN per 500 users); fixed: ZMSCORE and ZADD per 500 users. Memory O(threshold) per pair.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local sliding = ARGV[2] == 'sliding'
-- Members per ZMSCORE/ZADD call: keeps `unpack` well inside Lua's stack limit.
local CHUNK = 500

local out = {}
local a = 3
for k = 1, #KEYS, 2 do
  local zkey = KEYS[k]
  local mkey = KEYS[k + 1]
  local threshold = tonumber(ARGV[a])
  local period = tonumber(ARGV[a + 1])
  local first = a + 3
  local last = first + 2 * tonumber(ARGV[a + 2]) - 1
  a = last + 1

  local head = #out + 1
  out[head], out[head + 1], out[head + 2] = -1, 0, -1
  -- Users already handled in this call: their score is already `now`, nothing to ask Redis again.
  local seen = {}
  local touched = false
  local fired_now = false
  local fired_at, fired_count, fired_e, count

  if sliding then
    redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now - period)
    count = redis.call('ZCARD', zkey)
    local cd = redis.call('HMGET', mkey, 'a', 'c', 'e')
    fired_at, fired_count, fired_e = tonumber(cd[1]), tonumber(cd[2]) or 0, cd[3]
    if fired_at ~= nil and now >= fired_at + period then
      -- The cooldown is over but the key has not expired yet (injected time).
      fired_at, fired_count, fired_e = nil, 0, false
    end
    -- Which of the call's users are already kept, in one ZMSCORE per chunk instead of a call per hit (Lua's
    -- per-call overhead dominates a hot key's cost).
    local distinct = {}
    for i = first, last, 2 do
      local user = ARGV[i]
      if user ~= '' and not seen[user] then
        seen[user] = false
        distinct[#distinct + 1] = user
      end
    end
    local known = {}
    for c = 1, #distinct, CHUNK do
      local c_last = math.min(c + CHUNK - 1, #distinct)
      local scores = redis.call('ZMSCORE', zkey, unpack(distinct, c, c_last))
      for j = c, c_last do
        if scores[j - c + 1] then
          known[distinct[j]] = true
        end
      end
    end
    local kept_before = count
    local refreshed, added = {}, {}
    for i = first, last, 2 do
      local user, eid = ARGV[i], ARGV[i + 1]
      if fired_at ~= nil and eid ~= '' and eid == fired_e then
        out[#out + 1] = -1
      elseif user == '' then
        out[#out + 1] = count
      else
        if not seen[user] then
          seen[user] = true
          if known[user] then
            refreshed[#refreshed + 1] = user
          else
            added[#added + 1] = user
            -- A new user when `threshold` are kept replaces the one seen longest ago: the count saturates.
            count = math.min(count + 1, threshold)
          end
        end
        if fired_at == nil and count >= threshold then
          fired_at, fired_count, fired_e = now, count, eid
          fired_now = true
          out[#out + 1] = -1
        else
          out[#out + 1] = count
        end
      end
    end
    -- Every user of this call is now the most recently seen. Keep the `threshold` most recent: refresh the
    -- known ones, drop the oldest of the others, then add the new ones that stay, so the set never holds
    -- more than `threshold` members (past 128 it would leave the compact encoding for good).
    local function zadd(list, from, to, flag)
      for c = from, to, CHUNK do
        local args = {}
        if flag then
          args[1] = flag
        end
        for j = c, math.min(c + CHUNK - 1, to) do
          args[#args + 1] = now
          args[#args + 1] = list[j]
        end
        redis.call('ZADD', zkey, unpack(args))
      end
    end
    if #refreshed + #added >= threshold then
      -- The call alone brings `threshold` users: they are the ones kept.
      redis.call('DEL', zkey)
      zadd(refreshed, 1, math.min(#refreshed, threshold))
      zadd(added, 1, threshold - math.min(#refreshed, threshold))
    else
      zadd(refreshed, 1, #refreshed, 'XX')
      local excess = kept_before + #added - threshold
      if excess > 0 then
        redis.call('ZPOPMIN', zkey, excess)
      end
      zadd(added, 1, #added)
    end
    touched = #distinct > 0
    if touched then
      redis.call('PEXPIRE', zkey, period)
    end
    if fired_now then
      redis.call('DEL', mkey)
      redis.call('HSET', mkey, 'a', fired_at, 'c', fired_count, 'e', fired_e)
      redis.call('PEXPIRE', mkey, period)
    end
    if fired_at ~= nil then
      out[head], out[head + 1], out[head + 2] = fired_at, fired_count, fired_at
    end
  else
    local w = redis.call('HMGET', mkey, 's', 'f', 'fc', 'fe')
    local start = tonumber(w[1])
    fired_at, fired_count, fired_e = tonumber(w[2]), tonumber(w[3]) or 0, w[4]
    if start ~= nil and now >= start + period then
      -- A window that has ended but not expired yet (injected time, a clock step): start anew.
      redis.call('DEL', zkey, mkey)
      start, fired_at, fired_count, fired_e = nil, nil, 0, false
    end
    local fresh = false
    if fired_at ~= nil then
      count = fired_count
    elseif start ~= nil then
      count = redis.call('ZCARD', zkey)
    else
      count = 0
    end
    -- Which of the call's users the window already has: one ZMSCORE per chunk, not a call per hit.
    local known = {}
    if fired_at == nil and start ~= nil then
      local distinct, listed = {}, {}
      for i = first, last, 2 do
        local user = ARGV[i]
        if user ~= '' and not listed[user] then
          listed[user] = true
          distinct[#distinct + 1] = user
        end
      end
      for c = 1, #distinct, CHUNK do
        local c_last = math.min(c + CHUNK - 1, #distinct)
        local scores = redis.call('ZMSCORE', zkey, unpack(distinct, c, c_last))
        for j = c, c_last do
          if scores[j - c + 1] then
            known[distinct[j]] = true
          end
        end
      end
    end
    local added = {}
    for i = first, last, 2 do
      local user, eid = ARGV[i], ARGV[i + 1]
      if fired_at ~= nil and eid ~= '' and eid == fired_e then
        out[#out + 1] = -1
      elseif user == '' or fired_at ~= nil then
        -- No user, or the window already fired: nothing more to remember in this window.
        out[#out + 1] = count
      else
        if start == nil then
          start, fresh = now, true
        end
        if not seen[user] then
          seen[user] = true
          if not known[user] then
            count = count + 1
            added[#added + 1] = user
          end
        end
        if count >= threshold then
          fired_at, fired_count, fired_e = now, count, eid
          fired_now = true
          out[#out + 1] = -1
        else
          out[#out + 1] = count
        end
      end
    end
    local ends_in = start ~= nil and (start + period - now) or 0
    if not fired_now and #added > 0 then
      for c = 1, #added, CHUNK do
        local args = { 'NX' }
        for j = c, math.min(c + CHUNK - 1, #added) do
          args[#args + 1] = now
          args[#args + 1] = added[j]
        end
        redis.call('ZADD', zkey, unpack(args))
      end
      touched = true
    end
    if fired_now then
      -- Stop adding: the window cannot fire again, so its users are no longer needed.
      redis.call('DEL', zkey)
      redis.call('HSET', mkey, 's', start, 'f', fired_at, 'fc', fired_count, 'fe', fired_e)
      redis.call('PEXPIRE', mkey, ends_in)
    elseif fresh then
      redis.call('HSET', mkey, 's', start)
      redis.call('PEXPIRE', mkey, ends_in)
    end
    if touched and not fired_now then
      redis.call('PEXPIRE', zkey, ends_in)
    end
    if start ~= nil then
      out[head + 2] = start
    end
    if fired_at ~= nil then
      out[head], out[head + 1] = fired_at, fired_count
    end
  end
end
return out
