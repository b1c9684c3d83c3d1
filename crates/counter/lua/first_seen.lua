-- first_seen.lua: ONLY_NEW fires once per (rule, groupHash), also when the `isNew` event is redelivered.
--
-- One call handles several keys, each with several hits, in order.
--
-- KEYS[j]  string `<ns>:{<project>:<rule>:<group>}:new` = "<fired at ms>|<event id>", written with SET NX PX `ttl`.
-- ARGV[1]  now in ms, or '' to read the server's TIME
-- ARGV[2]  ttl in ms: how long the "already fired" mark lives. It must outlast any redelivery of the
--          `isNew` event (consumer crash, broker restart, retry/delay queues); the client's default is
--          7 days. After it, only a very late redelivery could fire again: `isNew` is true once per group.
-- then, per key j in order: n (hits) and n event ids ('' when the event has none)
--
-- The first hit fires. A later hit with the event id that fired is its redelivery: answered FIRED again
-- (same token). Without an event id a redelivery is not recognised and does not fire again, so a crash
-- between firing and publishing loses that notification: producers should set AMQP `message_id`.
--
-- Returns, per key j in order: fired_at (-1 when none), 1, 0, r_1, ..., r_n
--   r_i = -1 when hit i is the firing, else 0 (nothing is counted).
--
-- Complexity: O(total hits); memory O(1) per key.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local ttl = tonumber(ARGV[2])

local out = {}
local a = 3
for k = 1, #KEYS do
  local key = KEYS[k]
  local first = a + 1
  local last = first + tonumber(ARGV[a]) - 1
  a = last + 1

  local fired_at = nil
  local fired_id = nil
  local v = redis.call('GET', key)
  if v then
    local sep = string.find(v, '|', 1, true)
    if sep then
      fired_at = tonumber(string.sub(v, 1, sep - 1))
      fired_id = string.sub(v, sep + 1)
    end
  end

  local head = #out + 1
  out[head], out[head + 1], out[head + 2] = -1, 1, 0
  for i = first, last do
    local id = ARGV[i]
    if fired_at == nil then
      if redis.call('SET', key, string.format('%d', now) .. '|' .. id, 'NX', 'PX', ttl) then
        fired_at, fired_id = now, id
        out[#out + 1] = -1
      else
        out[#out + 1] = 0
      end
    elseif id ~= '' and id == fired_id then
      out[#out + 1] = -1
    else
      out[#out + 1] = 0
    end
  end
  if fired_at ~= nil then
    out[head] = fired_at
  end
end
return out
