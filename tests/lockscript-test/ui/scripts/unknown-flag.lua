#!lua flags=no-writes,fast
return redis.call("GET", KEYS[1])
