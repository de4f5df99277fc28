-- Promote: the sweeper returns a task whose retry time has come to PENDING.
-- From: RETRY_WAITING
-- To: PENDING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config
-- Returns: {OK, version} | {NOT_DUE} when not yet due or no longer waiting | {NOT_FOUND}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
if t.status ~= 'RETRY_WAITING' then return {C.NOT_DUE} end
local now = now_ms()
if tonumber(t.next_retry_at) > now then return {C.NOT_DUE} end

-- Due for dispatch now: the sweeper dispatches it right after promoting.
promote_now(K, t, now)
return {C.OK, t.version}
