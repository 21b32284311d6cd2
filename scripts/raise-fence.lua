-- raise-fence.lua: make a fencing counter at least a given value.
--
-- Used by Redlock, where each master keeps its own counter: after a grant on a
-- majority, the client raises the counter on those masters to the highest value
-- it saw there (its fencing token). Any later grant shares at least one master
-- with them and increments from there, so fencing tokens keep rising across
-- grants even though no single counter sees them all. Never lowers a counter.
-- The counter expires as acquire-with-retry.lua explains, ARGV[2] milliseconds
-- from now.
--
-- KEYS[1]  the fencing counter, lock:{name}:fence
-- ARGV[1]  the value it must reach, a positive integer
-- ARGV[2]  how long the counter lives from now, in milliseconds
--
-- Returns the counter's value afterwards

local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if current < floor then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return floor
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return current
