-- renew.lua: extend a lease, but only our own.
--
-- Sets a new time-to-live on the lock key only while it still holds the
-- caller's owner token. A lock that expired, was released, or now belongs to
-- someone else is left untouched: the caller has lost it and must stop.
--
-- KEYS[1]  the lock key, lock:{name}
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the new lease in milliseconds, counted from now, a positive integer
--
-- Returns 1  renewed
--         0  not renewed: the key is missing or holds another owner's token

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
