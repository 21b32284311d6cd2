-- Calls the command in ARGV[2..] under the protocol ARGV[1] names ("3": RESP3) and
-- returns its reply as Lua holds it.
if ARGV[1] == '3' then
  redis.setresp(3)
end
return redis.call(unpack(ARGV, 2))
