-- RESP3's forms built by the script: a double, a big number, a verbatim string.
local half = tonumber(ARGV[1]) / 2
return {{double = half}, {big_number = '12345678901234567890'},
  {verbatim_string = {format = 'txt', string = 'hi'}}}
