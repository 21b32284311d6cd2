-- A field's value, or false when the hash lacks it.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return false
end
return v
