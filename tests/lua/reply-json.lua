-- A hash as JSON text.
return cjson.encode(redis.call('HGETALL', KEYS[1]))
