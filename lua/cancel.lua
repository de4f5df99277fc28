-- Cancel: the owner or an admin cancels a task that has not ended. A lease holder learns of it
-- at its next heartbeat.
-- From: PENDING, QUEUED, PROCESSING, RETRY_WAITING
-- To: CANCELLED
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: who asks; ARGV[6]: '1' if admin; ARGV[7]: reason
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, version} | {REPLAYED, version} when already cancelled | {NOT_FOUND} (also for a
--   task of another owner) | {ILLEGAL_TRANSITION, state}
local by, admin = ARGV[5], ARGV[6]
local t = load_task(K.task)
if not visible(t, by, admin) then return {C.NOT_FOUND} end
if t.status == 'CANCELLED' then return {replay(K), t.version} end
if not LEGAL.cancel[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end

local now = now_ms()
change(K, t, 'cancel', 'CANCELLED', now, 0,
  {reason = ARGV[7], error_kind = 'cancelled', cancelled_by = by, next_retry_at = '',
   waiting_on = ''},
  {by = by, reason = ARGV[7]})
return finish({C.OK, t.version})
