-- del-all.lua: deletes every key it is given (a variadic KEYS script).
--
-- KEYS[1..n]  the keys to delete
--
-- Returns how many existed.
if #KEYS == 0 then
  return 0
end
return redis.call('DEL', unpack(KEYS))
