-- no_events_settle.lua: a NO_EVENTS rule's open silence was resolved and its resolved messages published: forget
-- it, unless another silence fired since (then that one stays open).
--
-- KEYS[1]  hash `<ns>:ne:{<projectId>}` (fields: see no_events_seen.lua)
-- ARGV[1]  the rule id
-- ARGV[2]  the start of the silence that was resolved, unix ms (`f:<rule>`)
--
-- Returns 1 when forgotten now, 0 otherwise.
--
-- Complexity: O(1).
if tonumber(redis.call('HGET', KEYS[1], 'f:' .. ARGV[1])) == tonumber(ARGV[2]) then
  redis.call('HDEL', KEYS[1], 'f:' .. ARGV[1])
  return 1
end
return 0
