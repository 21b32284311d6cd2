-- Valkey 9's DELIFEQ: the Redis servers of the matrix lack it, so the build warns
return redis.call("DELIFEQ", KEYS[1], ARGV[1])
