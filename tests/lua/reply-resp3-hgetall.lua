-- A hash under RESP3: a map, which replies as its pairs.
redis.setresp(3)
return redis.call('HGETALL', KEYS[1])
