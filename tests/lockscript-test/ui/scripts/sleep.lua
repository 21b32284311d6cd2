-- the classic mistake: SLEEP is not a Redis command
redis.call("SET", KEYS[1], ARGV[1])
redis.call("SLEEP", 1)
return 1
