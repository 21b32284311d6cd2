local rcall = redis.call
local function rc(...) return redis.call(...) end
rcall("ZADD", KEYS[1], 1)
rc("OBJECT", "ENCODINGG", KEYS[1])
local ok = pcall(rcall, "GETT", KEYS[1])
return rcall(ARGV[1], KEYS[1])
