--- Server time. The only clock any script reads: Redis TIME, in milliseconds.
-- Writes after TIME replicate as effects: the default since Redis 5 (the engine needs 6.2).

-- The call's time (now_ms) and its text, taken from TIME's own: Redis formats every number given to
-- redis.call (snprintf "%.17g", about 0.5 us each: docs/performance.md), and a call writes its time
-- several times (state_since, a deadline set's score, the stream entry, the history entry).
-- engine/core/lua_source.py CALL_STATE starts each call without them.
local NOW_MS = nil
local NOW_TEXT = nil

local function now_ms()
  local t = redis.call('TIME')
  NOW_TEXT = t[1] .. string.sub('00000' .. t[2], -6, -4)  -- seconds, then the first 3 of the 6 digits of the microseconds
  NOW_MS = tonumber(NOW_TEXT)
  return NOW_MS
end

-- The digits' texts: a number written to Redis or put in a text is formatted by snprintf (Redis's
-- "%.17g", Lua's "%.14g"), a single digit's text is looked up (versions, attempts, tokens).
local DIGIT = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}

-- `v` as written to Redis: the call's time as its text, a digit as its text, anything else as it is.
local function numtext(v)
  if v == NOW_MS then return NOW_TEXT end
  return DIGIT[v] or v
end
