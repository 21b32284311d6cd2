#!lua flags=no-writes
-- peek.lua: reads a key without writing; runs as EVALSHA_RO / EVAL_RO.
--
-- KEYS[1]  the key to read
--
-- Returns its value, or nil when missing.
return redis.call('GET', KEYS[1])
