-- dedup_release.lua: give up the lease taken by dedup_claim.lua after a failed attempt, so that the retry (by
-- any sender) can claim it at once. A lease held by another token, or a "sent" mark, is left alone.
--
-- KEYS[1]  string `<ns>:{dd:<notificationId>}` (see dedup_claim.lua)
-- ARGV[1]  token of the attempt that took the lease
--
-- Returns 1 when the lease was released, 0 otherwise.
--
-- Complexity: O(1).
if redis.call('GET', KEYS[1]) == 'lease:' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
