-- acquire-with-retry.lua: one atomic attempt to take a lock.
--
-- The lock is free when its key does not exist. Taking it stores the caller's
-- owner token with a time-to-live (SET NX, which also tells whether the lock
-- was free), raises the lock's fencing counter and returns the counter's new
-- value: every grant of this lock gets a strictly larger number, which a
-- protected resource can use to refuse writes from an older holder. When
-- someone else holds the lock, nothing is changed and the holder's remaining
-- time-to-live is returned, so the caller knows how long to wait.
--
-- The counter does not live forever: it expires ARGV[3] milliseconds after the
-- last grant (the lease plus the retention the client chose), so an idle lock
-- name costs no memory. A missing counter starts again from the server's clock
-- in microseconds (TIME), never from 1. A counter rises by one per grant, and a
-- grant takes the server more than a microsecond, so a counter never runs
-- ahead of that clock: the value it restarts from is higher than any it gave
-- before, as long as the server's clock has not stepped back by more than the
-- time the counter was idle. (A microsecond clock fits a Lua number exactly
-- until the year 2255.)
--
-- All or nothing: the lock key is written first. Every later step that can
-- fail (readers or permits holding the name, a counter that is not a number, a
-- command the user may not run, a bad ARGV[3]) deletes the key it just wrote
-- before returning its error, so an error reply always means "not acquired"
-- (at worst a fencing number is skipped). Memory is checked at a script's first
-- write, the SET, and not after it.
--
-- Four server commands when the lock is free, two when it is held: this
-- script runs on every grant, and each command it calls costs the server.
--
-- The retrying happens in the client, between calls: a loop in here would block
-- the whole server while it waits.
--
-- One name, one kind: while readers of a read/write lock or permits of a
-- semaphore of the same name hold it (fair-queue.lua keeps them in
-- lock:{name}:holders, not in the lock key), a lock is refused with an error
-- reply that starts with WRONGKIND, and nothing is changed.
--
-- KEYS[1]  the lock key, lock:{name}; its value is the holder's owner token
-- KEYS[2]  the fencing counter, lock:{name}:fence
-- KEYS[3]  the shared holders of the name, lock:{name}:holders (only read)
-- ARGV[1]  the caller's owner token (128 random bits, hex)
-- ARGV[2]  the lease in milliseconds, a positive integer
-- ARGV[3]  how long the counter outlives this grant, in milliseconds, at
--          least the lease
--
-- Returns {1, fence}  acquired; fence is the counter's new value: one more
--                     than the last, or the server's clock in microseconds
--         {0, pttl}   held by another owner; pttl is its remaining lease in
--                     milliseconds (-1 if that key has no expiry)

if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('DEL', KEYS[1])
  return redis.error_reply('WRONGKIND shared: readers or permits hold this name')
end
local fence = redis.pcall('INCR', KEYS[2])
local kept
if type(fence) ~= 'number' then
  kept = fence
elseif fence == 1 then
  -- The counter was missing (INCR made it 1): it restarts from the clock, or
  -- goes again if that fails, so that no counter is left that starts low.
  local now = redis.call('TIME')
  fence = now[1] * 1000000 + now[2]
  kept = redis.pcall('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3])
  if type(kept) == 'table' and kept.err then
    redis.call('DEL', KEYS[2])
  end
else
  kept = redis.pcall('PEXPIRE', KEYS[2], ARGV[3])
end
if type(kept) == 'table' and kept.err then
  redis.call('DEL', KEYS[1])
  return kept
end
return {1, fence}
