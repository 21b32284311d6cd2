-- put.lua: SET with a value, to test argument shapes.
--
-- KEYS[1]  the key
-- ARGV[1]  the value
--
-- Returns 'OK'.
return redis.call('SET', KEYS[1], ARGV[1])
