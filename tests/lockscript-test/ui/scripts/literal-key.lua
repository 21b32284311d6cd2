-- Counts a request against a limit read from a key the script names itself.
local limit = tonumber(redis.call('GET', 'config:limit'))
local used = redis.call('INCR', KEYS[1])
-- After a literal numkeys every key is known: 'requests:all' is one too.
redis.call('ZUNIONSTORE', KEYS[2], 2, KEYS[2], 'requests:all')
return used <= limit
