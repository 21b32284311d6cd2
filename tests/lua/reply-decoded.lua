-- The first value of MessagePack bytes, of JSON text, or of a big-endian 32-bit integer:
-- what the caller packed, which the check cannot know.
if ARGV[2] == 'json' then
  return cjson.decode(ARGV[1])
elseif ARGV[2] == 'struct' then
  return struct.unpack('>i4', ARGV[1])
end
return cmsgpack.unpack(ARGV[1])
