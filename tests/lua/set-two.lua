-- set-two.lua: sets its key and a second key it is not given as a key, as a script may
-- on a Cluster when both live on the same node (different slots).
--
-- KEYS[1]  the first key
-- ARGV[1]  the name of the second key
-- ARGV[2]  the value for both
--
-- Returns 2.
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', ARGV[1], ARGV[2])
return 2
