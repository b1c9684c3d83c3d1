-- alerts_read.lua: a project's alerts, newest first, at most ARGV[2] of them, optionally of one state. Index
-- entries whose alert has expired are removed on the way (from `idx`, and from `open`, `hand` and `res`: see
-- alert_open.lua).
--
-- KEYS[1]  zset `<ns>:al:{<projectId>}:idx` (see alert_open.lua)
-- ARGV[1]  the key prefix `<ns>:al:{<projectId>}:`
-- ARGV[2]  the most alerts returned (≥ 1)
-- ARGV[3]  the state wanted (`firing`, `acknowledged`, `resolved`) or '' for all
--
-- Returns {HGETALL of each alert…}.
--
-- Complexity: O(n) for the n ≤ the project's cap entries of its index.
local prefix = ARGV[1]
local limit = tonumber(ARGV[2])
local want = ARGV[3]
local out = {}
local ids = redis.call('ZREVRANGE', KEYS[1], 0, -1)
for _, id in ipairs(ids) do
  if #out >= limit then
    break
  end
  local ak = prefix .. 'a:' .. id
  local st = redis.call('HGET', ak, 'state')
  if not st then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', prefix .. 'open', id)
    redis.call('ZREM', prefix .. 'hand', id)
    redis.call('ZREM', prefix .. 'res', id)
  elseif want == '' or st == want then
    out[#out + 1] = redis.call('HGETALL', ak)
  end
end
return out
