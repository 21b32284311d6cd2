-- A misspelt command (`GETT`), called through an alias of redis.call.
local rcall = redis.call
return rcall("GETT", KEYS[1])
