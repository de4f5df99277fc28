-- Purge: the sweeper deletes a terminal task whose retention has passed.
-- From: SUCCESS, FAILED, TIMEOUT, CANCELLED
-- To: (none)
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of);
--   KEYS[T+1]: the page of the queue's index that holds the task (its head or a page: lib/index
--   index_route, as the sweeper found it); KEYS[T+2], KEYS[T+3]: the owner's index pages and the page
--   that holds the task (optional: a task without an owner)
-- ARGV[1..4]: engine config; ARGV[5]: task id; ARGV[6]: its entry of the ended line (lib/task), due
--   at its kept-until or ARGV[3] (retention) after it ended; '' for a task of the expiry set (one
--   that ended before the line, due at its score); ARGV[7], ARGV[8]: the names of the pages KEYS[T+1]
--   and KEYS[T+3] ('' for a head)
-- Returns: {OK} | {NOT_DUE} when not yet due or no longer terminal, or when a task still waits on
--   it (kept another retention period) | {NOT_FOUND} when the task is gone or, for an entry, the
--   task has not been in that ending since (retried): the entry is dropped | {MOVED} when a submit
--   moved an index's head into a page since the sweeper found the pages: nothing done, route again
local entry = ARGV[6] ~= '' and ARGV[6] or nil
local now = now_ms()
local t
if entry then
  t = load_task(K.task)
  local _, ended = ended_parse(entry)
  if not t or not TERMINAL[t.status] or tonumber(t.state_since) ~= ended then
    redis.call('LREM', K.ended, 1, entry)
    return {C.NOT_FOUND}
  end
  if ended_due(entry) > now then return {C.NOT_DUE} end
else
  t = load_listed(K.task, K.expiry, ARGV[5])
  if not t then return {C.NOT_FOUND} end
  local due = redis.call('ZSCORE', K.expiry, t.id)
  if not TERMINAL[t.status] or not due or tonumber(due) > now then return {C.NOT_DUE} end
end
-- A parent stays while a child still waits on it (the child would read it as gone: failed).
for _, kid in ipairs(redis.call('SMEMBERS', K.children)) do
  if redis.call('ZSCORE', K.waiting, kid) then
    if entry then  -- to the line's tail, kept another retention period
      redis.call('LREM', K.ended, 1, entry)
      redis.call('RPUSH', K.ended, ended_entry(t.id, t.state_since, now + CFG.retention_ms))
    else
      redis.call('ZADD', K.expiry, now + CFG.retention_ms, t.id)
    end
    return {C.NOT_DUE}
  end
end

local owner_pages, listed_at = KEYS[T + 2], t.listed_at or t.created_at  -- lib/record create
if index_route(K.index_pages, listed_at) ~= ARGV[7]
    or (owner_pages and index_route(owner_pages, listed_at) ~= ARGV[8]) then
  return {C.MOVED}
end

-- Out of its state's count: the field named after the state is the part of the count that no move
-- counter holds (engine/core/stats.py state_counts).
redis.call('HINCRBY', K.counts, t.status, -1)
if entry then redis.call('LREM', K.ended, 1, entry) end
redis.call('ZREM', K.expiry, t.id)
index_remove(K.index_pages, KEYS[T + 1], ARGV[7], t.id)
-- Left in a wait line only by a process from before the lines (lib/record: wait_lines): not forever.
redis.call('ZREM', K.pending_since, t.id)
redis.call('ZREM', K.queued_since, t.id)
if owner_pages then index_remove(owner_pages, KEYS[T + 3], ARGV[8], t.id) end
redis.call('DEL', K.task, K.body, K.args, K.result, K.history, K.checkpoints, K.children, K.notifications)
return {C.OK}
