return redis.call("LMPOP", 1, KEYS[1], "LEFT")
