-- Half of a number: Redis sends a Lua number as an integer, its fraction cut off.
local n = tonumber(ARGV[1])
return n / 2
