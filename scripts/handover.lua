-- handover.lua: pass a lock straight from its holder to the next waiter.
--
-- Used instead of compare-del.lua when the holder's own process has a task
-- waiting for the same lock: the release and the next grant happen in one
-- atomic step, so the waiter gets the lock one round trip sooner and without
-- an attempt of its own. Only while the key still holds the holder's owner
-- token is the fencing counter raised and the key given the waiter's token
-- with a fresh lease, exactly as acquire-with-retry.lua would have done.
-- Nothing is published: the lock is held again at once, so a waiter woken by a
-- notification would only find it taken. (The client falls back to
-- compare-del.lua every few handovers in a row, so waiters in other processes
-- get their turn.)
--
-- All or nothing: the counter is raised first, so if that fails the script
-- stops with an error and the lock still belongs to the holder; the SET after
-- it overwrites an existing key and does not fail. An error reply always means
-- "not handed over".
--
-- KEYS[1]  the lock key, lock:{name}; its value is the holder's owner token
-- KEYS[2]  the fencing counter, lock:{name}:fence; never expires
-- ARGV[1]  the current holder's owner token
-- ARGV[2]  the next holder's owner token (128 random bits, hex)
-- ARGV[3]  the next holder's lease in milliseconds, a positive integer
--
-- Returns fence  handed over; fence is the counter's new value (1, 2, 3...)
--         0      not handed over: the key is missing or holds another owner's
--                token; nothing was changed

if redis.call('GET', KEYS[1]) == ARGV[1] then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return fence
end
return 0
