--- Server time. The only clock any script reads: Redis TIME, in milliseconds.
if redis.replicate_commands then redis.replicate_commands() end  -- Redis 6.2: effects replication

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
