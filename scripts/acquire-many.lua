-- acquire-many.lua: take several locks at once, all of them or none.
--
-- A multi-lock's names that live on one server (or in one Cluster slot) are
-- taken by one call of this script: every lock key must be free, then each is
-- set to the caller's owner token with the same lease and each name's fencing
-- counter is raised, as acquire-with-retry.lua does for one name. When any of
-- the names is held, nothing is changed and the first held name's place and
-- remaining time-to-live are returned, so the caller knows what to wait for.
--
-- The names come in the caller's order, which is the same for every caller
-- (by Cluster slot, then by name): callers that take several slots one after
-- the other cannot wait for each other in a circle.
--
-- Each counter behaves as in acquire-with-retry.lua: one more than the last
-- grant, or (missing) the server's clock in microseconds; it expires ARGV[3]
-- milliseconds after this grant.
--
-- All or nothing: the checks come first and write nothing. Memory is checked
-- at a script's first write, the first SET; the writes after it are not
-- refused for memory. A step that still fails (a counter that is not a number,
-- a command the user may not run, a bad ARGV[3]) deletes every lock key this
-- call wrote before returning its error, so an error reply always means "none
-- acquired" (at worst a fencing number is skipped).
--
-- One name, one kind: while readers of a read/write lock or permits of a
-- semaphore hold one of the names (lock:{name}:holders exists), the call is
-- refused with an error reply that starts with WRONGKIND and names that lock
-- key, and nothing is changed.
--
-- KEYS     three per name, in order: the lock key lock:{name}, its fencing
--          counter lock:{name}:fence, its shared holders lock:{name}:holders
--          (only read)
-- ARGV[1]  the caller's owner token (128 random bits, hex), the same for all
-- ARGV[2]  the lease in milliseconds, a positive integer
-- ARGV[3]  how long each counter outlives this grant, in milliseconds, at
--          least the lease
--
-- Returns {1, fence_1, ..., fence_n}  all acquired; fence_i is the i-th
--                                     name's new fencing token
--         {0, pttl, i}                the i-th name (from 1) is held by
--                                     another owner for pttl more milliseconds
--                                     (-1 if that key has no expiry)

local n = #KEYS / 3
for i = 1, n do
  local lock = KEYS[3 * i - 2]
  if redis.call('EXISTS', lock) == 1 then
    return {0, redis.call('PTTL', lock), i}
  end
  if redis.call('EXISTS', KEYS[3 * i]) == 1 then
    return redis.error_reply('WRONGKIND shared: readers or permits hold ' .. lock)
  end
end

-- Deletes the lock keys of the first `upto` names: an error undoes the call.
local function undo(upto)
  for j = 1, upto do
    redis.call('DEL', KEYS[3 * j - 2])
  end
end

local reply = {1}
for i = 1, n do
  local fence_key = KEYS[3 * i - 1]
  redis.call('SET', KEYS[3 * i - 2], ARGV[1], 'PX', ARGV[2])
  local fence = redis.pcall('INCR', fence_key)
  local kept
  if type(fence) ~= 'number' then
    kept = fence
  elseif fence == 1 then
    -- The counter was missing: it restarts from the clock.
    local now = redis.call('TIME')
    fence = now[1] * 1000000 + now[2]
    kept = redis.pcall('SET', fence_key, string.format('%d', fence), 'PX', ARGV[3])
    if type(kept) == 'table' and kept.err then
      redis.call('DEL', fence_key)
    end
  else
    kept = redis.pcall('PEXPIRE', fence_key, ARGV[3])
  end
  if type(kept) == 'table' and kept.err then
    undo(i)
    return kept
  end
  reply[i + 1] = fence
end
return reply
