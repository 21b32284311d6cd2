-- BullMQ's idiom: keys built from a KEYS prefix are computed, not written into the
-- script, so they are not flagged (a Cluster needs them in KEYS[1]'s slot: a hash tag).
local rcall = redis.call
local jobKey = KEYS[1] .. ARGV[1]
rcall('HSET', jobKey, 'state', 'active')
rcall('LPUSH', KEYS[2], ARGV[1])
rcall('PUBLISH', 'jobs:events', ARGV[1])
return rcall('HGET', KEYS[1] .. ARGV[1], 'state')
