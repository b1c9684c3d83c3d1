-- held_forget.lua: takes a quiet-hours hold out of the index of held messages (`klaxon deliveries list`), but only
-- while the index still lists it with this due time: a hold of the same (project, rule, channel) indexed since
-- (the next window's, or its due time moved) stays listed.
--
-- KEYS[1]  zset  `<ns>:quiet:held`  member `["<project>","<rule>","<channel>"]` -> the hold's due time, unix ms
-- ARGV[1]  the member
-- ARGV[2]  the due time ms the caller saw
--
-- Returns 1 when the member was removed, 0 otherwise.
--
-- Complexity: O(log n) in the holds indexed.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
