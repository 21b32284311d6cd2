local function getIt(key)
  return rcall("GETT", key)
end
