-- handover.lua: pass a lock straight from its holder to the next waiter.
--
-- Used instead of compare-del.lua when the holder's own process has a task
-- waiting for the same lock: the release and the next grant happen in one
-- atomic step, so the waiter gets the lock one round trip sooner and without
-- an attempt of its own. Only while the key still holds the holder's owner
-- token is the fencing counter raised and the key given the waiter's token
-- with a fresh lease, exactly as acquire-with-retry.lua would have done (the
-- counter's expiry and its restart from the server's clock are explained there).
-- Nothing is published: the lock is held again at once, so a waiter woken by a
-- notification would only find it taken. (The client falls back to
-- compare-del.lua every few handovers in a row, so waiters in other processes
-- get their turn.)
--
-- All or nothing: the counter is raised first, so if that fails the script
-- stops with an error and the lock still belongs to the holder; the writes
-- after it set keys that exist or are new and do not fail. An error reply always means
-- "not handed over".
--
-- KEYS[1]  the lock key, lock:{name}; its value is the holder's owner token
-- KEYS[2]  the fencing counter, lock:{name}:fence
-- ARGV[1]  the current holder's owner token
-- ARGV[2]  the next holder's owner token (128 random bits, hex)
-- ARGV[3]  the next holder's lease in milliseconds, a positive integer
-- ARGV[4]  how long the counter outlives this grant, in milliseconds, at
--          least the lease
--
-- Returns fence  handed over; fence is the counter's new value: one more than
--                the last, or the server's clock in microseconds
--         0      not handed over: the key is missing or holds another owner's
--                token; nothing was changed

if redis.call('GET', KEYS[1]) == ARGV[1] then
  local fence
  if redis.call('EXISTS', KEYS[2]) == 1 then
    fence = redis.call('INCR', KEYS[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
  else
    local now = redis.call('TIME')
    fence = now[1] * 1000000 + now[2]
    redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[4])
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return fence
end
return 0
