local function getOrZero(key)
  return tonumber(rcall("GET", key)) or 0
end
