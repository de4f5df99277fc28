-- Overdue: the sweeper records, once each, that an unfinished task passed its due time ('overdue')
-- and its escalation time ('escalated'). Events only: the task's state does not change.
-- From: (none)
-- To: (none)
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: task id
-- Returns: {OK, 'overdue' | 'escalated'} | {NOT_DUE} when neither time has come or the task ended |
--   {NOT_FOUND}
local t = load_listed(K.task, K.watch, ARGV[5])
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local due, escalate = tonumber(t.due_at or 0), tonumber(t.escalate_at or 0)
local kind, next_at
if TERMINAL[t.status] then
  return {C.NOT_DUE}
elseif not t.overdue_at and due > 0 and due <= now then
  kind = 'overdue'
  if escalate > due then next_at = escalate end
elseif not t.escalated_at and escalate > 0 and escalate <= now then
  kind = 'escalated'
else
  return {C.NOT_DUE}
end

redis.call('HINCRBY', K.stats, kind, 1)
if next_at then redis.call('ZADD', K.watch, next_at, t.id) else redis.call('ZREM', K.watch, t.id) end
local fields = {}
fields[kind .. '_at'] = now
touch(K, t, now, fields, kind, {reason = kind .. ' while ' .. t.status, attempt = t.attempt, stage = t.stage}, true)
notify(K, t, kind, now, kind .. ' while ' .. t.status)
return {C.OK, kind}
