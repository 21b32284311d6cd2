-- bump.lua: adds ARGV[1] to the counter at KEYS[1].
--
-- KEYS[1]  the counter
-- ARGV[1]  the increment, an integer
--
-- Returns the counter's new value.
return redis.call('INCRBY', KEYS[1], ARGV[1])
