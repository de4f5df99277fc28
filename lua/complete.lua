-- Complete: the lease holder stores the result and ends the task in SUCCESS.
-- From: PROCESSING
-- To: SUCCESS
-- KEYS[1..T]: the task's keys (T = the fields of engine/keys.py TaskKeys)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: result JSON; ARGV[7]: worker name;
--   ARGV[8]: the type's circuit breaker settings (lib/breaker; '' = none); KEYS[T+1]: its hash
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, state, version} | {REPLAYED, state, version} for a repeat with the same token |
--   {NOT_FOUND} | {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local token = ARGV[5]
local refused = check_lease(K, t, 'complete', token, ARGV[7], now, true)
if refused then return refused end

redis.call('SET', K.result, ARGV[6])
breaker_outcome(K, KEYS[T + 1], t, true, now, breaker_cfg(ARGV[8]))
change(K, t, 'complete', 'SUCCESS', now, 0,
  {finished_at = now, progress = 1, ended_token = token, ended_by = 'complete', error_kind = '',
   reason = ''},
  {worker = ARGV[7]})
return finish({C.OK, t.status, t.version})
