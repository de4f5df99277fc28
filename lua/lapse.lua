-- Lapse: the sweeper cancels a task that was not started by its expiry time (submit's
-- expires_in): CANCELLED, reason expired, recorded once (history, event, webhook).
-- From: PENDING, QUEUED, RETRY_WAITING
-- To: CANCELLED
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: the task id
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, version} | {NOT_DUE} when its expiry has not come, or it started or ended (it then
--   leaves the start_by set) | {NOT_FOUND} (a task gone: it leaves the set)
local t = load_listed(K.task, K.start_by, ARGV[5])
if not t then return {C.NOT_FOUND} end
local now = now_ms()
if LEGAL.lapse[t.status] and lapsed(t, now) then
  lapse_now(K, t, now)
  return finish({C.OK, t.version})
end
if not LEGAL.lapse[t.status] or (tonumber(t.expires_at) or 0) == 0 then redis.call('ZREM', K.start_by, ARGV[5]) end
return {C.NOT_DUE}
