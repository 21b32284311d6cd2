--- @include "get-or-zero"
local function bump(key, by)
  return rcall("INCRBY", key, by) - getOrZero(key) + by
end
