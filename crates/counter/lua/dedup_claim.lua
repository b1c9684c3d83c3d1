-- dedup_claim.lua: take the right to deliver one notification, unless it was delivered already.
--
-- KEYS[1]  string `<ns>:{dd:<notificationId>}` = "sent" once delivered (written by the client with SET PX
--          <dedup ttl>), or "lease:<token>" while one sender attempts the delivery.
-- ARGV[1]  token of this attempt (random, unique per attempt)
-- ARGV[2]  lease length in ms: longer than one delivery attempt can take, so that a crashed sender's lease
--          runs out and the redelivered task can be attempted again.
--
-- Returns {state, ms}:
--   {1, 0}     claimed: deliver, then mark "sent" (or release the lease on failure, see dedup_release.lua)
--   {0, 0}     already delivered: drop the task (ack it) without sending
--   {2, pttl}  another sender holds the lease for pttl more ms: try again later (do not send now)
--
-- Complexity: O(1); memory O(1) per notification, expiring with the dedup ttl.
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], 'lease:' .. ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
if v == 'sent' then
  return {0, 0}
end
if v == 'lease:' .. ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0}
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  ttl = 0
end
return {2, ttl}
