-- latin1.lua: stores a Latin-1 (not UTF-8) value, as a script file can hold it.
--
-- KEYS[1]  the key
--
-- Returns OK.
return redis.call('SET', KEYS[1], 'café')
