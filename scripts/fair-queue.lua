-- fair-queue.lua: the waiter queue of a fair lock, with direct handoff.
--
-- Waiters in any process stand in one queue per lock, kept next to the lock in
-- the same hash slot. A release does not free the lock for whoever comes first:
-- in the same atomic step it gives the lock to the first live waiter (its owner
-- token, a fresh lease, the next fencing token) and publishes that on the
-- waiter's own channel, so exactly one waiter wakes, already holding the lock.
--
-- Tickets. A waiter's ticket is the string '<token> <claim_ms> <channel>': its
-- owner token (128 random bits, hex), the lease it gets when the lock is handed
-- to it, and the pub/sub channel its process listens on. The queue
-- (lock:{name}:queue) orders tickets by arrival, on the server's clock in
-- microseconds; a second sorted set (lock:{name}:alive) holds each ticket's
-- deadline in milliseconds. A waiter renews its deadline by calling 'acquire'
-- again; a ticket whose deadline passed (its process died) is dropped by the
-- next call, before anyone is served. Every clock reading here is the server's
-- (TIME); no client clock is trusted. Both sets expire ARGV[6] after the last
-- renewal of any ticket, so the queue of a lock nobody waits for disappears.
--
-- Dead waiters. A waiter that died after its last renewal can still be handed
-- the lock; it then holds it only for its claim lease (short: a live waiter
-- extends it at once), and when that runs out the next call of any waiter hands
-- the lock on. A waiter that gives up (cancelled, timed out) calls 'release'
-- with its ticket: the ticket goes, and if the lock was handed to it meanwhile,
-- it goes straight on to the next waiter.
--
-- Operations (ARGV[1]):
--   'acquire'  take the lock if it is free and the caller is first in line (or
--              nobody waits); otherwise queue the caller's ticket (ARGV[3]), or
--              renew its deadline if it is queued already. With an empty ticket
--              the call only tries and never queues (try_lock). A free lock with
--              someone else first in line is handed to that waiter now.
--   'release'  drop the caller's ticket (ARGV[3], may be empty); then, if the
--              caller holds the lock, give it to the first live waiter, or delete
--              it and publish on lock:{name}:released when nobody waits.
--
-- Fences, as in acquire-with-retry.lua: every grant gets the counter's next
-- value; a missing counter restarts from the server's clock in microseconds.
--
-- All or nothing for the lock: dropping dead tickets comes first (harmless in
-- any case); then every value is computed and the waiter's message published
-- before the lock and the counter are written, so a refused PUBLISH (an ACL
-- without the channel) stops the script with the lock unchanged. Those writes
-- set keys that exist or are new and do not fail.
--
-- KEYS[1]  the lock key, lock:{name}; its value is the holder's owner token
-- KEYS[2]  the fencing counter, lock:{name}:fence
-- KEYS[3]  the queue, lock:{name}:queue (sorted set: ticket -> arrival, us)
-- KEYS[4]  the deadlines, lock:{name}:alive (sorted set: ticket -> deadline, ms)
-- ARGV[1]  'acquire' or 'release'
-- ARGV[2]  the caller's owner token
-- ARGV[3]  the caller's ticket, '<token> <claim_ms> <channel>', or ''
-- ARGV[4]  the lease in milliseconds for a grant to the caller, a positive
--          integer
-- ARGV[5]  how long the counter outlives a grant, in milliseconds, at least
--          any lease
-- ARGV[6]  how long the caller's ticket stays alive without a renewal, in
--          milliseconds
--
-- Returns {status, fence, ms, now}; now is the server's clock in microseconds
--   acquire: {1, fence, lease, now}  acquired by this call, lease ARGV[4]
--            {2, fence, pttl, now}   handed to the caller before this call;
--                                    pttl is what is left of its lease
--            {0, 0, pttl, now}       queued (or, without a ticket, refused);
--                                    pttl is the holder's remaining lease
--   release: {1, 0, 0, now}          released (and handed on if anyone waits)
--            {0, 0, 0, now}          the caller did not hold the lock

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now / 1000)

-- Drop the tickets whose deadline has passed.
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms, 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('ZREM', KEYS[3], unpack(dead))
  redis.call('ZREM', KEYS[4], unpack(dead))
end

local function next_fence()
  local counter = redis.call('GET', KEYS[2])
  if counter then
    return tonumber(counter) + 1
  end
  return now
end

local function grant(token, fence, lease)
  redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[5])
  redis.call('SET', KEYS[1], token, 'PX', lease)
end

-- The first live ticket, read: {ticket, token, claim, channel}, or nil.
local function first()
  while true do
    local ticket = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not ticket then
      return nil
    end
    local token, claim, channel = string.match(ticket, '^(%x+) (%d+) (.+)$')
    if token then
      return {ticket, token, claim, channel}
    end
    -- Not a ticket this script wrote: dropped.
    redis.call('ZREM', KEYS[3], ticket)
    redis.call('ZREM', KEYS[4], ticket)
  end
end

-- Gives the (free, or the caller's) lock to the waiter `w` and tells it so.
local function hand_to(w)
  local fence = next_fence()
  redis.call('PUBLISH', w[4], string.format('grant %s %d %d %s', w[2], fence, now, w[3]))
  redis.call('ZREM', KEYS[3], w[1])
  redis.call('ZREM', KEYS[4], w[1])
  grant(w[2], fence, w[3])
end

local token, ticket = ARGV[2], ARGV[3]
local holder = redis.call('GET', KEYS[1])

if ARGV[1] == 'release' then
  if ticket ~= '' then
    redis.call('ZREM', KEYS[3], ticket)
    redis.call('ZREM', KEYS[4], ticket)
  end
  if holder ~= token then
    return {0, 0, 0, now}
  end
  local w = first()
  if w then
    hand_to(w)
  else
    redis.call('PUBLISH', KEYS[1] .. ':released', 'released')
    redis.call('DEL', KEYS[1])
  end
  return {1, 0, 0, now}
end

if holder == token then
  return {2, tonumber(redis.call('GET', KEYS[2])) or 0, redis.call('PTTL', KEYS[1]), now}
end
if not holder then
  local w = first()
  if not w or w[1] == ticket then
    local fence = next_fence()
    if w then
      redis.call('ZREM', KEYS[3], ticket)
      redis.call('ZREM', KEYS[4], ticket)
    end
    grant(token, fence, ARGV[4])
    return {1, fence, tonumber(ARGV[4]), now}
  end
  hand_to(w)
end
if ticket ~= '' then
  if not redis.call('ZSCORE', KEYS[3], ticket) then
    redis.call('ZADD', KEYS[3], now, ticket)
  end
  redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[6]), ticket)
  -- Both sets go when the last waiter stops renewing: an idle lock costs nothing.
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
end
return {0, 0, redis.call('PTTL', KEYS[1]), now}
