--[[
  Claims the next waiting job: moves it from the wait list to the active list and
  marks it as taken, in the idiom of large job-queue projects (`rcall`).

  Input:
    KEYS[1] wait list
    KEYS[2] active list
    ARGV[1] worker token

  Planted mistake: `HSETT` (line 17) is a typo for HSET, called through `rcall`.
]]
local rcall = redis.call
local jobId = rcall("RPOPLPUSH", KEYS[1], KEYS[2])
if not jobId then
  return nil
end
rcall("HSETT", KEYS[2] .. ":" .. jobId, "lockedBy", ARGV[1])
return jobId
