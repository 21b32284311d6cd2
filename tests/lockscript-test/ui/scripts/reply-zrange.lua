-- Members and scores under RESP2: flat, member then score.
return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
