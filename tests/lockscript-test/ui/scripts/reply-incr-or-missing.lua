-- Counts only an existing key; tells when it is missing.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('INCR', KEYS[1])
end
return 'missing'
