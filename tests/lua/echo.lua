-- echo.lua: answers what arrived, to test how arguments are laid out.
--
-- KEYS[1..n]  any keys
-- ARGV[1..m]  any arguments
--
-- Returns {#KEYS, #ARGV, KEYS[1..n], ARGV[1..m]}.
local out = {#KEYS, #ARGV}
for i = 1, #KEYS do
  out[#out + 1] = KEYS[i]
end
for i = 1, #ARGV do
  out[#out + 1] = ARGV[i]
end
return out
