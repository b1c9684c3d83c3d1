-- mutes_read.lua: the mutes of one or more projects, at most ARGV[1] of each: a bounded read, so a project with
-- more mutes than --max-mutes-per-project (stored before the limit, or by a process with a higher one) costs
-- what a project at the limit costs, on every firing batch.
--
-- KEYS[i]  hash `<ns>:mutes:{<projectId>}` (see mute_add.lua). Several keys only on a single Redis node; in a
--          cluster the caller sends one key per call.
-- ARGV[1]  the most mutes returned per key (≥ 1)
--
-- Returns one reply per key: {stored, field1, value1, field2, value2, …} where `stored` = HLEN and the pairs are
-- every mute when stored ≤ ARGV[1], else the first ARGV[1] in HSCAN order (stable while the hash is unchanged).
--
-- Complexity: O(min(stored, ARGV[1])) per key: HSCAN stops once ARGV[1] pairs are taken (at most 64 calls).
local max = tonumber(ARGV[1])
local count = math.max(max, 100)
local out = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local stored = redis.call('HLEN', key)
  local item = {stored}
  if stored <= max then
    local all = redis.call('HGETALL', key)
    for i = 1, #all do
      item[#item + 1] = all[i]
    end
  else
    local cursor = '0'
    local taken = 0
    local calls = 0
    repeat
      local r = redis.call('HSCAN', key, cursor, 'COUNT', count)
      cursor = r[1]
      local pairs = r[2]
      for i = 1, #pairs, 2 do
        if taken >= max then
          break
        end
        item[#item + 1] = pairs[i]
        item[#item + 1] = pairs[i + 1]
        taken = taken + 1
      end
      calls = calls + 1
    until cursor == '0' or taken >= max or calls >= 64
  end
  out[k] = item
end
return out
