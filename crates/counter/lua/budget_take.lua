-- budget_take.lua: takes one unit of a project's hourly budget (reminders per hour) for one notification, once:
-- the same notification asking again (a retry, a task parked and back) takes nothing more.
--
-- KEYS[1]  hash `<ns>:{budget:<project>}:reminders:<hour>` = notification id -> 1 (the units taken this hour)
-- ARGV[1]  the notification id
-- ARGV[2]  the budget: units per hour
-- ARGV[3]  the key's TTL in ms (past the end of its hour)
--
-- Returns 1 when the notification has its unit (taken now or before), 0 when the hour's budget is spent.
--
-- Complexity: O(1); memory O(budget) per project and hour (nothing is added past the budget), expiring.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 1
end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
