-- fair-queue.lua: the waiter queue of a lock, a read/write lock or a semaphore,
-- with direct handoff.
--
-- Waiters in any process stand in one queue per name, kept next to the lock in
-- the same hash slot. A release does not free the lock for whoever comes first:
-- in the same atomic step it gives the lock to the first live waiter (its owner
-- token, a fresh lease, the next fencing token) and publishes that on the
-- waiter's own channel, so exactly the waiters served wake, already holding it.
--
-- Kinds. Every grant is of one kind:
--   'x'  exclusive: a lock, or the write side of a read/write lock. The holder's
--        token is the value of the lock key (as with acquire-with-retry.lua), so
--        renew.lua and guarded scripts work on it. Granted when no 'x' holds and
--        no 'r' or 'p' holder is live.
--   'r'  shared: the read side. Holders are members of lock:{name}:holders,
--        scored by the end of their lease, with their fencing token in
--        lock:{name}:fences. Granted when no 'x' holds.
--   'p'  a permit of a semaphore: a holder in lock:{name}:holders like 'r'.
--        Granted while fewer than ARGV[8] permits are live.
-- One name, one kind of shared holder: readers and permits are never mixed. The
-- kind of the shared holders is kept in lock:{name}:fences under the field '~kind'
-- (tokens are hex, so it is never a holder's); an 'acquire' of the other shared
-- kind while some hold is refused with an error reply that starts with
-- WRONGKIND and names the kind that holds ('r' or 'p'), and nothing is granted.
--
-- The queue is served in order: its first waiter is granted as soon as its kind
-- can be, then the next, and so on until one cannot; nobody overtakes. So a
-- waiting writer stops the readers that came after it (writer preference), and
-- readers that queued together are let in together.
--
-- Tickets. A waiter's ticket is the string '<token> <claim_ms> <kind> <channel>':
-- its owner token (128 random bits, hex), the lease it gets when the lock is
-- handed to it, its kind, and the pub/sub channel its process listens on. The
-- queue (lock:{name}:queue) orders tickets by arrival, on the server's clock in
-- microseconds; lock:{name}:alive holds each ticket's deadline in milliseconds.
-- A waiter renews its deadline by calling 'acquire' again; a ticket whose
-- deadline passed (its process died) is dropped by the next call, before anyone
-- is served. Every clock reading here is the server's (TIME); no client clock is
-- trusted. The queue, its deadlines, the holders and their fences expire when
-- nobody renews them, so a name nobody uses costs nothing.
--
-- Dead waiters. A waiter that died after its last renewal can still be handed
-- the lock; it then holds it only for its claim lease (short: a live waiter
-- extends it at once), and when that runs out the next call of any waiter serves
-- the queue on. A waiter that gives up (cancelled, timed out) calls 'release'
-- with its ticket: the ticket goes, and if it was served meanwhile, what it got
-- goes straight on to the next.
--
-- Operations (ARGV[1]), for the caller's token (ARGV[2]) and kind (ARGV[4]):
--   'acquire'    take it if the kind can be granted and nobody waits ahead;
--                otherwise queue the ticket (ARGV[3]), or renew its deadline if
--                it is queued already. With an empty ticket the call only tries
--                and never queues (try_lock). Serves the queue first.
--   'release'    drop the ticket (ARGV[3], may be empty); give up what the token
--                holds, and serve the queue. A free lock nobody waits for is
--                deleted and lock:{name}:released published (for waiters not in
--                fair mode).
--   'renew'      set the token's lease to ARGV[5] ms from now, if it holds one
--                ('r' and 'p'; an 'x' holder uses renew.lua).
--   'holds'      whether the token holds a live grant of the kind.
--   'downgrade'  an 'x' holder becomes an 'r' holder with a lease of ARGV[5] ms,
--                and the readers first in line come in with it.
--
-- Fences, as in acquire-with-retry.lua: every grant of any kind gets the
-- counter's next value, so a writer's token is higher than every earlier
-- reader's and writer's; a missing counter restarts from the server's clock in
-- microseconds.
--
-- All or nothing for the holders: dropping expired tickets and holders comes
-- first (harmless in any case); then, for every waiter served, its message is
-- published before its grant is written, so a refused PUBLISH (an ACL without
-- the channel) stops the script with that waiter not granted. Those writes set
-- keys that exist or are new and do not fail.
--
-- KEYS[1]  the lock key, lock:{name}: the 'x' holder's owner token
-- KEYS[2]  the fencing counter, lock:{name}:fence
-- KEYS[3]  the queue, lock:{name}:queue (sorted set: ticket -> arrival, us)
-- KEYS[4]  the deadlines, lock:{name}:alive (sorted set: ticket -> deadline, ms)
-- KEYS[5]  the shared holders, lock:{name}:holders (sorted set: token -> end of
--          lease, ms)
-- KEYS[6]  their fencing tokens, lock:{name}:fences (hash: token -> fence)
-- ARGV[1]  the operation
-- ARGV[2]  the caller's owner token
-- ARGV[3]  the caller's ticket, '<token> <claim_ms> <kind> <channel>', or ''
-- ARGV[4]  the caller's kind, 'x', 'r' or 'p'
-- ARGV[5]  the lease in milliseconds for a grant to (or renewal of) the caller, a
--          positive integer
-- ARGV[6]  how long the counter outlives a grant, in milliseconds, at least
--          any lease
-- ARGV[7]  how long the caller's ticket stays alive without a renewal, in
--          milliseconds
-- ARGV[8]  the number of permits ('p'; ignored otherwise)
--
-- Returns {status, fence, ms, now}; now is the server's clock in microseconds
--   acquire:   {1, fence, lease, now}  acquired by this call, lease ARGV[5]
--              {2, fence, left, now}   granted to the caller before this call;
--                                      left is what remains of its lease, ms
--              {0, 0, pttl, now}       queued (or, without a ticket, refused);
--                                      pttl: the 'x' holder's lease left, or -2
--   release:   {1, 0, 0, now} released;  {0, 0, 0, now} the caller held nothing
--   renew, holds, downgrade:
--              {1, 0, 0, now} done;      {0, 0, 0, now} the caller held nothing

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now_ms = math.floor(now / 1000)
local op, token, ticket, kind = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local limit = tonumber(ARGV[8])

-- Drop the tickets whose deadline has passed, and the shared holders whose
-- lease has.
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms, 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('ZREM', KEYS[3], unpack(dead))
  redis.call('ZREM', KEYS[4], unpack(dead))
end
local ended = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now_ms, 'LIMIT', 0, 100)
if #ended > 0 then
  redis.call('ZREM', KEYS[5], unpack(ended))
  redis.call('HDEL', KEYS[6], unpack(ended))
end
-- Shared holders without their fences are none. Both keys are written together
-- and the fences' expiry is never the earlier, but a backward step of the
-- server's clock can bring the holders' key back after its expiry had passed,
-- once the server's active expiry (which takes keys one by one) had deleted the
-- fences: every holder in it is then a ghost with no fencing token. They go, so
-- that no operation answers for them and they take no permit.
if redis.call('EXISTS', KEYS[5]) == 1 and redis.call('EXISTS', KEYS[6]) == 0 then
  redis.call('DEL', KEYS[5])
end

local function next_fence()
  local counter = redis.call('GET', KEYS[2])
  if counter then
    return tonumber(counter) + 1
  end
  return now
end

-- Whether a grant of kind `k` can be made now.
local function admits(k)
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return false
  end
  if k == 'x' then
    return redis.call('ZCARD', KEYS[5]) == 0
  elseif k == 'p' then
    return redis.call('ZCARD', KEYS[5]) < limit
  end
  return true
end

-- Makes `who` a holder of kind `k` with a lease of `ms` from now.
local function hold(who, k, ms)
  if k == 'x' then
    redis.call('SET', KEYS[1], who, 'PX', ms)
  else
    redis.call('ZADD', KEYS[5], now_ms + tonumber(ms), who)
    for i = 5, 6 do
      if redis.call('PTTL', KEYS[i]) < tonumber(ms) then
        redis.call('PEXPIRE', KEYS[i], ms)
      end
    end
  end
end

-- Writes a grant of kind `k` to `who` with lease `ms` and fence `fence`.
local function grant(who, k, ms, fence)
  local f = string.format('%d', fence)
  redis.call('SET', KEYS[2], f, 'PX', ARGV[6])
  if k ~= 'x' then
    redis.call('HSET', KEYS[6], who, f, '~kind', k)
  end
  hold(who, k, ms)
end

-- The fencing token of `who`'s grant of kind `k` (which it holds): the counter for
-- the one 'x' holder (nothing is granted while it holds), its own for the others.
local function fence_of(who, k)
  local f
  if k == 'x' then
    f = redis.call('GET', KEYS[2])
  else
    f = redis.call('HGET', KEYS[6], who)
  end
  return tonumber(f) or 0
end

-- The lease left of `who`'s grant of kind `k`, in ms; nil if it holds none.
local function held(who, k)
  if k == 'x' then
    if redis.call('GET', KEYS[1]) == who then
      return redis.call('PTTL', KEYS[1])
    end
    return nil
  end
  local ends = redis.call('ZSCORE', KEYS[5], who)
  if ends then
    return tonumber(ends) - now_ms
  end
  return nil
end

local function leave(t)
  redis.call('ZREM', KEYS[3], t)
  redis.call('ZREM', KEYS[4], t)
end

-- The first ticket, read: {ticket, token, claim, kind, channel}, or nil.
local function first()
  while true do
    local t = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not t then
      return nil
    end
    local w, claim, k, channel = string.match(t, '^(%x+) (%d+) ([xrp]) (.+)$')
    if w then
      return {t, w, claim, k, channel}
    end
    -- Not a ticket this script wrote: dropped.
    leave(t)
  end
end

-- Serves the queue in order while its first waiter can be granted; the caller's
-- own ticket, when reached, is granted without a message. Returns the caller's
-- fence if it was granted, and whether anyone was.
local function serve()
  local served = false
  while true do
    local w = first()
    if not w or not admits(w[4]) then
      return nil, served
    end
    local fence = next_fence()
    served = true
    if w[1] == ticket then
      leave(w[1])
      grant(w[2], w[4], ARGV[5], fence)
      return fence, served
    end
    -- Written before it is announced: a script that stops midway keeps what it
    -- wrote (Redis undoes nothing), so a grant the server refused to write (an
    -- ACL without SET, a full memory) must stop the script before its message.
    grant(w[2], w[4], w[3], fence)
    leave(w[1])
    redis.call('PUBLISH', w[5], string.format('grant %s %d %d %s', w[2], fence, now, w[3]))
  end
end

local function reply(status)
  return {status, 0, 0, now}
end

if op == 'holds' then
  local left = held(token, kind)
  return reply((left and left > 0) and 1 or 0)
end

if op == 'renew' then
  if kind == 'x' or not held(token, kind) then
    return reply(0)
  end
  hold(token, kind, ARGV[5])
  return reply(1)
end

if op == 'downgrade' then
  if held(token, 'x') == nil then
    return reply(0)
  end
  local f = redis.call('GET', KEYS[2]) or '0'
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[6], token, f, '~kind', 'r')
  hold(token, 'r', ARGV[5])
  serve()
  return reply(1)
end

if op == 'release' then
  if ticket ~= '' then
    leave(ticket)
  end
  if held(token, kind) == nil then
    -- The ticket that left may have stood in front of waiters that can be
    -- served now: serve them rather than leave them to their next renewal.
    if ticket ~= '' then
      serve()
    end
    return reply(0)
  end
  if kind == 'x' then
    redis.call('DEL', KEYS[1])
  else
    redis.call('ZREM', KEYS[5], token)
    redis.call('HDEL', KEYS[6], token)
  end
  local _, served = serve()
  if not served and kind == 'x' then
    redis.call('PUBLISH', KEYS[1] .. ':released', 'released')
  end
  return reply(1)
end

-- acquire
local left = held(token, kind)
if left then
  local fence = fence_of(token, kind)
  if fence > 0 then
    return {2, fence, left, now}
  end
  -- An 'x' holder whose counter is gone (it outlives a grant by ARGV[6], and
  -- renew.lua extends only the lock): a grant without its fence is none. It
  -- goes, and the caller is served as one that holds nothing (a grant now has
  -- the next fence). Shared holders without fences went above.
  redis.call('DEL', KEYS[1])
end
if kind ~= 'x' and redis.call('EXISTS', KEYS[5]) == 1 then
  local holding = redis.call('HGET', KEYS[6], '~kind')
  if holding and holding ~= kind then
    return redis.error_reply('WRONGKIND ' .. holding .. ': the name is held by another kind')
  end
end
local fence = serve()
if fence then
  return {1, fence, tonumber(ARGV[5]), now}
end
if not first() and admits(kind) then
  fence = next_fence()
  grant(token, kind, ARGV[5], fence)
  return {1, fence, tonumber(ARGV[5]), now}
end
if ticket ~= '' then
  if not redis.call('ZSCORE', KEYS[3], ticket) then
    redis.call('ZADD', KEYS[3], now, ticket)
  end
  redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[7]), ticket)
  -- Both sets go when the last waiter stops renewing.
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
  redis.call('PEXPIRE', KEYS[4], ARGV[7])
end
return {0, 0, redis.call('PTTL', KEYS[1]), now}
