-- Each of these works on some servers of the matrix only.
local started = os.clock()
print("checking", KEYS[1])
local allowed = redis.acl_check_cmd("GET", KEYS[1])
return { allowed, started }
