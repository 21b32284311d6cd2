local rcall = redis.call
--- @include "includes/nowhere"
return rcall("GET", KEYS[1])
