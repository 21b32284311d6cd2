-- a valid script with one key and one argument
return redis.call("GET", KEYS[1]) == ARGV[1]
