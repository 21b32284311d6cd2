-- A command the caller names: its reply is not known.
return redis.call(ARGV[1], KEYS[1])
