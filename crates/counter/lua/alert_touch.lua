-- alert_touch.lua: counts a batch's matching events into the open alerts of their (rule, group)s, all of one
-- project: `events` grows, `last` (the last matching event) moves forward, and the alert's keys live on
-- (resolveAfter + retention after that event). A (rule, group) without an open alert is left alone.
--
-- KEYS[i]  string `<ns>:al:{<projectId>}:cur:<ruleId>:<group>` (all of one project: one slot)
-- ARGV[1]  now, unix ms ('' = the server's TIME): lifetimes are relative to it
-- ARGV[2]  the key prefix `<ns>:al:{<projectId>}:`
-- ARGV[3]  how long an open alert outlives its last event, ms
-- ARGV[2 + 2i]      events of KEYS[i] in the batch
-- ARGV[2 + 2i + 1]  the last of them, unix ms
--
-- Returns the number of open alerts touched.
--
-- Complexity: O(log n) per key.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local prefix = ARGV[2]
local keep = tonumber(ARGV[3])
local touched = 0
for i, cur_key in ipairs(KEYS) do
  local id = redis.call('GET', cur_key)
  if id then
    local ak = prefix .. 'a:' .. id
    local st = redis.call('HGET', ak, 'state')
    if st and st ~= 'resolved' then
      local n = tonumber(ARGV[2 + 2 * i])
      local at = tonumber(ARGV[3 + 2 * i])
      redis.call('HINCRBY', ak, 'events', n)
      local last = tonumber(redis.call('HGET', ak, 'last')) or 0
      if at > last then
        redis.call('HSET', ak, 'last', at)
        last = at
      end
      local live = math.max(last + (tonumber(redis.call('HGET', ak, 'resolveAfter')) or 0) + keep - now, 1)
      redis.call('PEXPIRE', ak, live, 'GT')
      redis.call('PEXPIRE', cur_key, live, 'GT')
      redis.call('PEXPIRE', prefix .. 'idx', live, 'GT')
      -- the open alert's entry says when its keys expire (alert_open.lua forgets it then)
      for _, z in ipairs({'open', 'hand'}) do
        redis.call('ZADD', prefix .. z, 'XX', 'GT', now + live, id)
        redis.call('PEXPIRE', prefix .. z, live, 'GT')
      end
      touched = touched + 1
    end
  end
end
return touched
