-- Under RESP3 a script's false replies 0 (to a RESP2 caller), not nil.
redis.setresp(3)
return redis.call('EXISTS', KEYS[1]) == 1
