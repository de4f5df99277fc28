-- Heartbeat: the lease holder extends its lease. Not an event: nothing a watcher sees changes.
-- From: PROCESSING
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id; ARGV[7]: lease ms;
--   ARGV[8]: worker name
-- Returns: {OK, ms until the lease deadline} | {NOT_FOUND} | {LEASE_LOST, state} |
--   {CANCELLED, state} | {ATTEMPT_ENDED, state} for the token of the attempt that has just
--   reported its own outcome (a heartbeat still in flight then: not counted, not recorded)
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local token, claim = ARGV[5], ARGV[6]
-- complete, fail and release set ended_token; the next claim clears it (and issues a new token).
if t.ended_token == token and is_lease(t, token, claim) then return {C.ATTEMPT_ENDED, t.status} end
local now = now_ms()
local refused = check_lease(K, t, 'heartbeat', token, claim, ARGV[8], now, false)
if refused then return refused end

save_task(K.task, t, {lease_until = now + tonumber(ARGV[7])})
local deadline = lease_deadline(t)
redis.call('ZADD', K.leases, deadline, t.id)
return {C.OK, deadline - now}
