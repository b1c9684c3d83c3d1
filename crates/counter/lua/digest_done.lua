-- digest_done.lua: completes a claimed digest window once its notification is published (confirmed).
--
-- KEYS[1]  hash    `<ns>:{dg:<project>:<rule>:<channel>}:claim:<start>`
-- KEYS[2]  string  `…:lease:<start>`
--
-- Returns the number of keys deleted (0 when already completed: harmless).
--
-- Complexity: O(groups) to free the record.
return redis.call('DEL', KEYS[1], KEYS[2])
