local rcall = redis.call
--- @include "includes/get-or-zero"
--- @include "includes/bump.lua"
return bump(KEYS[1], ARGV[1]) + getOrZero(KEYS[1])
