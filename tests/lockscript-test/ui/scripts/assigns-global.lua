total = 0
function add(n) total = total + n end
add(1)
return redis.call("SET", KEYS[1], total)
