-- Half of a number, sent as text so that it keeps its fraction.
local n = tonumber(ARGV[1])
return tostring(n / 2)
