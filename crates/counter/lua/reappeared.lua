-- reappeared.lua: REAPPEARED, decided atomically per (rule, groupHash): the hit that sees a group again after at
-- least `quiet` ms without events fires, once per reappearance.
--
-- KEYS[j]  hash `<ns>:{<project>:<rule>:<group>}:rp`, fields:
--            l   when the group was last seen (ms)
--            fa  when it last reappeared (ms), fe the event id of that firing hit ('' when none),
--            fp  when it had been seen before that reappearance (ms; -1 when its mark had expired)
--          It expires (PEXPIRE) `ttl` ms after the group's last event: the client passes quiet + min(quiet, 1 day),
--          so that a mark outlives the quiet it must detect.
-- ARGV[1]  now in ms, or '' to read the server's TIME
-- then, per key j in order: quiet ms (>= 1), ttl ms (>= quiet), armed ms (since when the rule watches groups),
--          n (hits), and per hit: new ('1' when the event is a group's first occurrence, else '0') and event id
--          ('' = none)
--
-- Per hit, in order:
--   * the event id of the key's last firing: a redelivery, FIRED again with the same token;
--   * a mark, last seen >= quiet ago: fires (a reappearance after a known quiet);
--   * no mark, the event not new, and the rule has watched for >= quiet (now - armed >= quiet): fires (the group
--     was seen before, by Hawk's isNew, and not within the mark's life, so for longer than quiet);
--   * otherwise no firing (a new group is ONLY_NEW's business).
--   Every hit then marks the group seen now.
--
-- Returns, per key j in order: fired_at, previous, token, r_1, ..., r_n
--   fired_at  the last reappearance's firing time (ms), or -1 when there is none
--   previous  when the group had been seen before that reappearance (ms), or -1 when unknown
--   token     fired_at (the reappearance's identity inside its (rule, group)), 0 when none
--   r_i       -1 when hit i is the firing (first or redelivered), else 0
--
-- Complexity: per key one HMGET, one HSET and one PEXPIRE: O(n). Memory O(1) per (rule, group) seen within ttl.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end

local out = {}
local a = 2
for k = 1, #KEYS do
  local key = KEYS[k]
  local quiet = tonumber(ARGV[a])
  local ttl = tonumber(ARGV[a + 1])
  local armed = tonumber(ARGV[a + 2])
  local n = tonumber(ARGV[a + 3])
  local first = a + 4
  a = first + 2 * n

  local w = redis.call('HMGET', key, 'l', 'fa', 'fe', 'fp')
  local seen = tonumber(w[1])
  local fired_at, fired_id, previous = tonumber(w[2]), w[3], tonumber(w[4]) or -1
  local head = #out + 1
  out[head], out[head + 1], out[head + 2] = -1, -1, 0
  local fired_now = false
  for i = 0, n - 1 do
    local new = ARGV[first + 2 * i] == '1'
    local id = ARGV[first + 2 * i + 1]
    if fired_at ~= nil and id ~= '' and id == fired_id then
      out[#out + 1] = -1
    elseif (seen ~= nil and now - seen >= quiet) or (seen == nil and not new and now - armed >= quiet) then
      fired_at, fired_id, previous = now, id, seen or -1
      fired_now = true
      out[#out + 1] = -1
    else
      out[#out + 1] = 0
    end
    if seen == nil or now > seen then
      seen = now
    end
  end
  if fired_now then
    redis.call('HSET', key, 'l', seen, 'fa', fired_at, 'fe', fired_id, 'fp', previous)
  else
    redis.call('HSET', key, 'l', seen)
  end
  redis.call('PEXPIRE', key, ttl)
  if fired_at ~= nil then
    out[head], out[head + 1], out[head + 2] = fired_at, previous, fired_at
  end
end
return out
