--- Retry delay from the task's backoff spec (set at submit by engine/registry.py):
---   'exp <base_ms> <factor> <cap_ms> <jitter>'  or  'list <jitter> <ms> <ms> ...'
--- `attempt` is the attempt that just failed (1-based); `rnd` in [0, 1) comes from the client.
local function backoff_ms(spec, attempt, rnd)
  local p = {}
  for w in string.gmatch(spec, '%S+') do p[#p + 1] = w end
  local delay, jitter
  if p[1] == 'exp' then
    delay = math.min(tonumber(p[4]), tonumber(p[2]) * tonumber(p[3]) ^ (attempt - 1))
    jitter = tonumber(p[5])
  else
    jitter = tonumber(p[2])
    delay = tonumber(p[math.min(attempt, #p - 2) + 2])
  end
  return math.floor(delay * (1 - jitter * rnd))
end
