-- leader.lua: who leads an election now (see proclaim.lua), read in one step.
--
-- The leader is the holder of the lock key; its record counts only while it
-- was written by that holder's owner token, so a record left by an earlier
-- leader is never taken for the current one's. Only reads: the same answer a
-- replica would give, and no write on the way.
--
-- KEYS[1]  the lock key, lock:{name}
-- KEYS[2]  the leader's record, lock:{name}:leader
--
-- Returns {0, -2, '', ''}              nobody leads (the lock is free)
--         {1, pttl, '', ''}            a leader holds the lock for pttl more
--                                      milliseconds (-1: no expiry) and has not
--                                      proclaimed yet
--         {2, pttl, term, value}       the leader, its term (decimal) and value

local holder = redis.call('GET', KEYS[1])
if not holder then
  return {0, -2, '', ''}
end
local pttl = redis.call('PTTL', KEYS[1])
local record = redis.call('HMGET', KEYS[2], 'token', 'term', 'value')
if record[1] ~= holder or not record[2] or not record[3] then
  return {1, pttl, '', ''}
end
return {2, pttl, record[2], record[3]}
