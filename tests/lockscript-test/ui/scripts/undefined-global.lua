local rcall = redis.call
local function getOrZero(key)
  return tonumber(rcall("GET", key)) or 0
end
return getOrZer(KEYS[1]) + missingHelper(KEYS[1])
