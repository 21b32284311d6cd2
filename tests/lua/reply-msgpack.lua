-- A text, a number and a key's value (false when it is missing), as MessagePack bytes.
return cmsgpack.pack(ARGV[1], tonumber(ARGV[2]), redis.call('GET', KEYS[1]))
