-- Adds ARGV[1] to the counter at KEYS[1] (the guide's guarded-script example).
return redis.call('INCRBY', KEYS[1], ARGV[1])
