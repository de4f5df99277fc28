-- Retry: the owner or an admin reopens a task that failed or timed out; attempts start again.
-- From: FAILED, TIMEOUT
-- To: PENDING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: who asks; ARGV[6]: '1' if admin; ARGV[7]: retry id
--   (unique per call)
-- Returns: {OK, version} | {REPLAYED, version} for a resent call | {NOT_FOUND} (also for a task
--   of another owner) | {ILLEGAL_TRANSITION, state}
local by, admin, retry_id = ARGV[5], ARGV[6], ARGV[7]
local t = load_task(K.task)
if not visible(t, by, admin) then return {C.NOT_FOUND} end
if t.retry_id == retry_id then return {replay(K), t.version} end
if not LEGAL.retry[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end

local now = now_ms()
change(K, t, 'retry', 'PENDING', now, now + CFG.dispatch_grace_ms,
  {attempt = 0, retry_id = retry_id, retried_by = by, error_kind = '',
   reason = '', next_retry_at = '', stage = '', progress = 0, message = ''},
  {by = by, reason = 'manual retry by ' .. by, attempt = t.attempt})
-- Unfinished again: watched for the due or escalation time it has not yet been recorded past.
local watch_at = watch_time(t)
if watch_at then redis.call('ZADD', K.watch, watch_at, t.id) end
return {C.OK, t.version}
