#!lua flags=no-writes
return tostring(os.clock()) .. redis.call("GET", KEYS[1])
