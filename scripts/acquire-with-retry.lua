-- acquire-with-retry.lua: one atomic attempt to take a lock.
--
-- The lock is free when its key does not exist. Taking it raises the lock's
-- fencing counter and stores the caller's owner token with a time-to-live, and
-- returns the counter's new value: every grant of this lock gets a strictly
-- larger number, which a protected resource can use to refuse writes from an
-- older holder. When someone else holds the lock, nothing is changed and the
-- holder's remaining time-to-live is returned, so the caller knows how long to
-- wait.
--
-- All or nothing: the counter is raised first, so if that fails (a counter that
-- is not a number, memory refused) the script stops with an error before the
-- lock key is written, and an error reply always means "not acquired". The SET
-- after it writes a key that does not exist and does not fail (at worst, if the
-- user may INCR but not SET, a fencing number is skipped).
--
-- The retrying happens in the client, between calls: a loop in here would block
-- the whole server while it waits.
--
-- KEYS[1]  the lock key, lock:{name}; its value is the holder's owner token
-- KEYS[2]  the fencing counter, lock:{name}:fence; never expires
-- ARGV[1]  the caller's owner token (128 random bits, hex)
-- ARGV[2]  the lease in milliseconds, a positive integer
--
-- Returns {1, fence}  acquired; fence is the counter's new value (1, 2, 3...)
--         {0, pttl}   held by another owner; pttl is its remaining lease in
--                     milliseconds (-1 if that key has no expiry)

if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
