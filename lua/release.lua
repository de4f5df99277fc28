-- Release: the lease holder gives the task back unfinished (graceful shutdown); no attempt is consumed.
-- From: PROCESSING
-- To: PENDING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id; ARGV[7]: reason;
--   ARGV[8]: worker name
-- Returns: {OK, state, version} | {REPLAYED, state, version} for a repeat with the same token |
--   {NOT_FOUND} | {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local token, claim = ARGV[5], ARGV[6]
local refused = check_lease(K, t, 'release', token, claim, ARGV[8], now, true)
if refused then return refused end

change(K, t, 'release', 'PENDING', now, now + CFG.dispatch_grace_ms,
  {attempt = t.attempt - 1, ended_token = token, ended_by = 'release', stage = '', returning = '1'},
  {worker = ARGV[8], reason = ARGV[7], attempt = t.attempt})
return {C.OK, t.status, t.version}
