-- compare-del.lua: release a lock, but only our own.
--
-- Deletes the lock key only while it still holds the caller's owner token, so a
-- holder whose lease ran out can never delete the lock of the next holder. It
-- publishes on the lock's release channel, lock:{name}:released (the key name
-- followed by ':released'), so waiters wake at once instead of polling. The
-- channel is a pub/sub name, not a key.
--
-- All or nothing: the publish comes first, so if it is refused (a user without
-- the channel or PUBLISH) the script stops with an error and the lock is still
-- held; the DEL after it does not fail. An error reply always means "not
-- released". Waiters only act on the message after this script has finished,
-- when the key is gone.
--
-- KEYS[1]  the lock key, lock:{name}
-- ARGV[1]  the caller's owner token
--
-- Returns 1  released, and waiters notified
--         0  not released: the key is missing or holds another owner's token

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PUBLISH', KEYS[1] .. ':released', 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
