-- Members and scores under RESP3: each a pair, the score a double.
redis.setresp(3)
return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
