-- Every field and value of a hash, as one flat array.
return redis.call('HGETALL', KEYS[1])
