-- MULTI cannot run inside a script
redis.call("MULTI")
return redis.call("GET", KEYS[1])
