-- Heartbeat: the lease holder extends its lease. Not an event: nothing a watcher sees changes.
-- From: PROCESSING
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T = the fields of engine/keys.py TaskKeys)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: lease ms; ARGV[7]: worker name
-- Returns: {OK, ms until the lease deadline} | {NOT_FOUND} | {LEASE_LOST, state} |
--   {CANCELLED, state} | {ATTEMPT_ENDED, state} for the token of the attempt that has just
--   reported its own outcome (a heartbeat still in flight then: not counted, not recorded)
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local token = ARGV[5]
-- complete, fail and release set ended_token; the next claim clears it (and issues a new token).
if t.ended_token == token and tostring(t.token) == token then return {C.ATTEMPT_ENDED, t.status} end
local now = now_ms()
local refused = check_lease(K, t, 'heartbeat', token, ARGV[7], now, false)
if refused then return refused end

save_task(K.task, t, {lease_until = now + tonumber(ARGV[6])})
local deadline = lease_deadline(t)
redis.call('ZADD', K.leases, deadline, t.id)
return {C.OK, deadline - now}
