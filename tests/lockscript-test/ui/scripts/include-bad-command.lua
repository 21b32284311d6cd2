local rcall = redis.call
--- @include "includes/bad-command"
return getIt(KEYS[1])
