-- Under RESP3 a missing key's null is a Lua nil, where the table ends.
redis.setresp(3)
return redis.call('MGET', KEYS[1], KEYS[2])
