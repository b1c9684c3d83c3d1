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
-- Lifetimes move in steps: the alert's hash keeps `exp`, when its keys expire (unix ms, also its score in the
-- `open`/`hand` zsets). Only when the lifetime an event asks for (last + resolveAfter + retention) passes `exp`
-- are the keys extended, by a minute more than asked: a hot alert pays its 7 expiry and index writes once a
-- minute, not on every batch. Keys never expire before their lifetime; they may live up to a minute longer.
--
-- Returns the number of open alerts touched.
--
-- Complexity: O(1) per key (GET, HMGET, HINCRBY, HSET), plus O(log n) once a minute per open alert.
local now = tonumber(ARGV[1])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local prefix = ARGV[2]
local keep = tonumber(ARGV[3])
-- the lifetime margin: how much longer than asked the keys are made to live when they are extended
local STEP = 60000
local touched = 0
local idx_live = 0
for i, cur_key in ipairs(KEYS) do
  local id = redis.call('GET', cur_key)
  if id then
    local ak = prefix .. 'a:' .. id
    local f = redis.call('HMGET', ak, 'state', 'last', 'resolveAfter', 'exp')
    local st = f[1]
    if st and st ~= 'resolved' then
      local n = tonumber(ARGV[2 + 2 * i])
      local at = tonumber(ARGV[3 + 2 * i])
      redis.call('HINCRBY', ak, 'events', n)
      local last = tonumber(f[2]) or 0
      if at > last then
        last = at
      end
      local asked = last + (tonumber(f[3]) or 0) + keep
      if asked > (tonumber(f[4]) or 0) then
        local exp = math.max(asked + STEP, now + 1)
        local live = exp - now
        redis.call('HSET', ak, 'last', last, 'exp', exp)
        redis.call('PEXPIRE', ak, live, 'GT')
        redis.call('PEXPIRE', cur_key, live, 'GT')
        -- the open alert's entry says when its keys expire (alert_open.lua forgets it then)
        for _, z in ipairs({'open', 'hand'}) do
          redis.call('ZADD', prefix .. z, 'XX', 'GT', exp, id)
          redis.call('PEXPIRE', prefix .. z, live, 'GT')
        end
        idx_live = math.max(idx_live, live)
      elseif last > (tonumber(f[2]) or 0) then
        redis.call('HSET', ak, 'last', last)
      end
      touched = touched + 1
    end
  end
end
if idx_live > 0 then
  redis.call('PEXPIRE', prefix .. 'idx', idx_live, 'GT')
end
return touched
