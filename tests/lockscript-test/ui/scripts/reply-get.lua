-- GET replies nil when the key is missing.
return redis.call('GET', KEYS[1])
