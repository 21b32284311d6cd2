--- @include "includes/cycle-a"
return redis.call("GET", KEYS[1])
