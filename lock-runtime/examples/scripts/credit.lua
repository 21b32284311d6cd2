-- Credits an account, at most once per transfer id.
-- KEYS[1] balance, KEYS[2] set of applied transfer ids; ARGV[1] transfer id, ARGV[2] amount.
-- Returns the new balance, or -1 when the transfer was applied before.
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return -1
end
return redis.call('INCRBY', KEYS[1], ARGV[2])
