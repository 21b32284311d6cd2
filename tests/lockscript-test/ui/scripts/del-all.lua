-- deletes every key it is given
return redis.call("DEL", unpack(KEYS))
