-- a syntax error on line 3
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
  return 1
