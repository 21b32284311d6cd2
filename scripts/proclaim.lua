-- proclaim.lua: the leader of an election says who it is.
--
-- An election is the lock of its name: its leader is the lock's holder, and
-- the leader's term is the fencing token of its grant. The leader's record,
-- lock:{name}:leader, keeps the owner token it was written by, the term and a
-- value (typically the leader's address) for followers to read
-- (leader.lua). It is written only while the caller's token holds the lock,
-- so a leader that lost its lease (paused past it, say) can never overwrite
-- the record of the next one. Followers are told on the channel
-- lock:{name}:proclaimed (a pub/sub name, not a key), with the term as the
-- message.
--
-- All or nothing: the publish comes first, so if it is refused (a user
-- without the channel or PUBLISH) the script stops with an error and the
-- record is unchanged; the writes after it do not fail. Observers act on the
-- message only after this script has finished.
--
-- The record outlives the lease by ARGV[4] milliseconds, like the fencing
-- counter, so an idle election name costs no memory; a record left by a
-- leader that is gone is never read as the leader's (its token is not the
-- lock's).
--
-- KEYS[1]  the lock key, lock:{name}; its value is the leader's owner token
-- KEYS[2]  the leader's record, lock:{name}:leader (a hash: token, term, value)
-- ARGV[1]  the caller's owner token
-- ARGV[2]  the caller's term (its grant's fencing token), decimal
-- ARGV[3]  the value to proclaim
-- ARGV[4]  how long the record lives, in milliseconds, a positive integer
--
-- Returns 1  proclaimed, and observers told
--         0  not proclaimed: the caller does not hold the lock (any more)

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PUBLISH', KEYS[1] .. ':proclaimed', ARGV[2])
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'term', ARGV[2], 'value', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
