-- append.lua: the chaos checker's store write, sent guarded.
--
-- The workers run it with #[lock_script("chaos/append.lua", guarded)], on the
-- lock's own server: the guard lets it run only while the lock key holds the
-- writer's owner token and no later holder has been granted the lock. It writes
-- the value and appends the writer's fencing token to a log the checker reads at
-- the end, so the order in which the server accepted tokens can be checked (it
-- must never go down).
--
-- KEYS[1]  the value, data:{name}
-- KEYS[2]  the log of accepted tokens (a list), data:{name}:log
-- ARGV[1]  the writer's fencing token
-- ARGV[2]  the value
--
-- Returns 1

redis.call('SET', KEYS[1], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
