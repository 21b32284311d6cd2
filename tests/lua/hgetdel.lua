-- hgetdel.lua: takes one field of a hash (reads and deletes it) with HGETDEL, which
-- Redis has from 8.0 and Valkey from 9.1: a script that older servers cannot run.
--
-- KEYS[1]  the hash
-- ARGV[1]  the field
--
-- Returns the field's value, or nil.
return redis.call('HGETDEL', KEYS[1], 'FIELDS', 1, ARGV[1])[1]
