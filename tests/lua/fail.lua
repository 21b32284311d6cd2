-- fail.lua: fails on purpose, to test how script errors come back.
--
-- KEYS[1]  a key that INCR is run on
-- ARGV[1]  'reply' to fail with redis.error_reply; anything else runs INCR
--
-- Returns the incremented value, or an error.
if ARGV[1] == 'reply' then
  return redis.error_reply('boom: refused on purpose')
end
return redis.call('INCR', KEYS[1])
