-- fenced-append.lua: the chaos checker's fenced store.
--
-- fenced-set.lua, plus a log: a write carries its writer's fencing token and is
-- refused when the store has already accepted a higher one; an accepted write
-- appends its token to a log the checker reads at the end, so the order in which
-- the store accepted tokens can be checked (it must never go down).
--
-- KEYS[1]  the value
-- KEYS[2]  the highest fencing token accepted so far
-- KEYS[3]  the log of accepted tokens (a list)
-- ARGV[1]  the writer's fencing token, a positive integer
-- ARGV[2]  the value
--
-- Returns 1  written
--         0  refused: a higher token has written already

local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[1])
if token < seen then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
return 1
