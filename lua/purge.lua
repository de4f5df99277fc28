-- Purge: the sweeper deletes a terminal task whose retention has passed.
-- From: SUCCESS, FAILED, TIMEOUT, CANCELLED
-- To: (none)
-- KEYS[1..T]: the task's keys (T = the fields of engine/keys.py TaskKeys); KEYS[T+1]: the owner's task index (optional)
-- ARGV[1..4]: engine config; ARGV[5]: task id
-- Returns: {OK} | {NOT_DUE} when not yet due or no longer terminal, or when a task still waits on
--   it (kept another retention period) | {NOT_FOUND}
local t = load_listed(K.task, K.expiry, ARGV[5])
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local due = redis.call('ZSCORE', K.expiry, t.id)
if not TERMINAL[t.status] or not due or tonumber(due) > now then return {C.NOT_DUE} end
-- A parent stays while a child still waits on it (the child would read it as gone: failed).
for _, kid in ipairs(redis.call('SMEMBERS', K.children)) do
  if redis.call('ZSCORE', K.waiting, kid) then
    redis.call('ZADD', K.expiry, now + CFG.retention_ms, t.id)
    return {C.NOT_DUE}
  end
end

redis.call('HINCRBY', K.counts, t.status, -1)
redis.call('ZREM', K.expiry, t.id)
redis.call('ZREM', K.index, t.id)
-- Left in a wait line only by a process from before the lines (lib/record: wait_lines): not forever.
redis.call('ZREM', K.pending_since, t.id)
redis.call('ZREM', K.queued_since, t.id)
if KEYS[T + 1] then redis.call('ZREM', KEYS[T + 1], t.id) end
redis.call('DEL', K.task, K.body, K.args, K.result, K.history, K.checkpoints, K.children, K.notifications)
return {C.OK}
