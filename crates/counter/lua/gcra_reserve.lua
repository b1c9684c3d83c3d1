-- gcra_reserve.lua: a fleet-wide rate limit (GCRA, the generic cell rate algorithm) that reserves a send slot,
-- shared fairly between the projects that use the destination.
--
-- KEYS[1]  string `<ns>:{rl:<destination>}` = the theoretical arrival time (TAT), unix ms on the Redis clock
-- KEYS[2]  (with a project) string `<ns>:{rl:<destination>}:p:<project>` = the project's TAT at its share
-- KEYS[3]  (with a project) zset `<ns>:{rl:<destination>}:active` = project -> until when it has demand, ms
--          (its TAT after its last reservation, or the slot a refused request waits for)
-- ARGV[1]  now in ms, or '' to read the server's TIME (one clock for the whole fleet)
-- ARGV[2]  emission interval in ms (1000 / messages per second)
-- ARGV[3]  burst tolerance in ms (interval * (burst - 1); 0 = strictly one message per interval)
-- ARGV[4]  longest wait in ms the caller accepts (its priority's horizon); a slot further away is not reserved
-- ARGV[5]  (with a project) grace in ms: a project stays active this long after its demand ends
-- ARGV[6]  (with a project) the project's id (the member of KEYS[3])
-- ARGV[5] alone, ARGV[7] with a project: calls, how many requests this delivery sends (default 1; a Telegram
--          lifecycle message edits the firing message and replies: 2). They take that many consecutive slots,
--          the first one `wait` away, and count that many messages against the project's share.
--
-- Fair share: the projects with demand now (a reserved slot still ahead, or a refused request waiting; plus
-- ARGV[5] ms of grace) are the destination's active projects, n of them. Each project also has its own TAT
-- advancing n intervals per message, so while others are active a project gets at most 1/n of the rate and
-- cannot reserve the slots ahead that another project's next message would need; alone, it has all of it
-- (work-conserving: a project that sent its one message stops counting soon after). A project whose own next
-- slot is later than the destination's is over its share: it is told to wait (nothing reserved).
--
-- Returns {reserved, wait_ms}:
--   {1, wait}  a slot is reserved `wait` ms from now (0 = send at once): sleep that long, then send. Every
--              caller that gets a reservation sends at its own slot, so the limit holds across processes.
--   {0, wait}  the next free slot is `wait` ms away, more than ARGV[4], or the project is over its share and
--              its next slot is `wait` ms away: nothing was reserved; delay the message (never drop it) and ask
--              again then.
--
-- Complexity: O(log P) for P active projects (ZADD, ZREMRANGEBYSCORE of the expired ones, ZCARD); memory O(1)
-- per destination and per (destination, project) that sent lately, O(P) for the active set; every key expires
-- once idle.
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local interval = tonumber(ARGV[2])
local tolerance = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])
local shared = #KEYS == 3
local calls = math.max(1, tonumber(ARGV[shared and 7 or 5] or '1') or 1)

-- ZADD … GT by hand (Redis before 6.2 has no GT): a member's score only ever moves later
local function raise(key, score, member)
  local old = tonumber(redis.call('ZSCORE', key, member) or '-1')
  if score > old then
    redis.call('ZADD', key, score, member)
  end
end

-- the active set lives as long as its latest member needs it (a TTL is only ever extended)
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local wait = tat - tolerance - now

local n = 1
local ptat = now
local grace = 0
local project = ''
local over = false
if shared then
  grace = tonumber(ARGV[5])
  project = ARGV[6]
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - grace)
  raise(KEYS[3], now, project)
  n = redis.call('ZCARD', KEYS[3])
  ptat = tonumber(redis.call('GET', KEYS[2]) or '0')
  if ptat < now then
    ptat = now
  end
  if n > 1 then
    -- over its share: the project's next slot is later than the destination's. Nothing is reserved (a
    -- destination slot taken now and used later would let two sends bunch): it asks again when its share
    -- allows, and the destination's slot stays free for the others.
    local pwait = ptat - tolerance - now
    if pwait > wait and pwait > 0 then
      wait = pwait
      over = true
    end
  end
end

if wait < 0 then
  wait = 0
end
if wait > max_wait or over then
  if shared then
    -- waiting is demand: the project keeps its share until it comes back for this slot
    raise(KEYS[3], now + wait, project)
    keep(KEYS[3], wait + grace + 1000)
  end
  return {0, wait}
end
local new_tat = tat + interval * calls
redis.call('SET', KEYS[1], new_tat, 'PX', new_tat - now + 1000)
if shared then
  -- the project's own clock: at its share while others are active, at the full rate alone
  local slot = now + wait
  if ptat < slot then
    ptat = slot
  end
  local new_ptat = ptat + interval * n * calls
  redis.call('SET', KEYS[2], new_ptat, 'PX', new_ptat - now + grace + 1000)
  raise(KEYS[3], new_ptat, project)
  keep(KEYS[3], new_ptat - now + grace + 1000)
end
return {1, wait}
