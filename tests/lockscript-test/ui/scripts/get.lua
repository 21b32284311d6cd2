-- reads KEYS only by fixed index
return redis.call("GET", KEYS[1])
