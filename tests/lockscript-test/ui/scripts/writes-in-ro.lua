#!lua flags=no-writes
-- claims to be read-only, then writes
return redis.call("SET", KEYS[1], ARGV[1])
