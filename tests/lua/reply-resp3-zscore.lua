-- A score under RESP3: a double ({double = n}), which replies as text.
redis.setresp(3)
return redis.call('ZSCORE', KEYS[1], ARGV[1])
