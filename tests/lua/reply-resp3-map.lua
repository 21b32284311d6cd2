-- A map and a set built by the script.
if ARGV[1] == 'map' then
  return {map = {a = '1', b = '2'}}
end
return {set = {x = true, y = true}}
