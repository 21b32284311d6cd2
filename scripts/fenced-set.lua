-- fenced-set.lua: a write that a stale lock holder cannot make.
--
-- An example of the other half of fencing: the protected resource remembers the
-- highest fencing token it has seen and refuses writes that carry a lower one.
-- A holder that was paused past its lease (GC, swap, SIGSTOP) still believes it
-- holds the lock, but its token is lower than the next holder's, so its late
-- write is refused here instead of overwriting newer data.
--
-- KEYS[1]  the value to write
-- KEYS[2]  the highest fencing token seen for it, e.g. <value key>:fence-seen
-- ARGV[1]  the writer's fencing token, a positive integer
-- ARGV[2]  the value
--
-- Returns 1  written (the token was not lower than any seen)
--         0  refused: a holder with a higher token has written already

local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[1])
if token < seen then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
