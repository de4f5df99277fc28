--- Server time. The only clock any script reads: Redis TIME, in milliseconds.
-- Writes after TIME replicate as effects: the default since Redis 5 (the engine needs 6.2).

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
