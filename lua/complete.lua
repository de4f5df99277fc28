-- Complete: the lease holder stores the result and ends the task in SUCCESS.
-- From: PROCESSING
-- To: SUCCESS
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id; ARGV[7]: result JSON;
--   ARGV[8]: worker name; ARGV[9]: the type's circuit breaker settings (lib/breaker; '' = none); KEYS[T+1]: its hash
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, state, version} | {REPLAYED, state, version} for a repeat with the same token |
--   {NOT_FOUND} | {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local token, claim = ARGV[5], ARGV[6]
local refused = check_lease(K, t, 'complete', token, claim, ARGV[8], now, true)
if refused then return refused end

body_set_result(K, ARGV[7])
breaker_outcome(K, KEYS[T + 1], t, true, now, breaker_cfg(ARGV[9]))
-- A SUCCESS task stores none of progress (1), ended_token (its token) and ended_by ('complete'): its
-- state implies them (lib/task: load_task; engine/core/models.py Task.from_redis).
change(K, t, 'complete', 'SUCCESS', now, 0,
  {progress = '', ended_token = '', ended_by = '', error_kind = '', reason = ''},
  {worker = ARGV[8]})
return finish({C.OK, t.status, t.version})
