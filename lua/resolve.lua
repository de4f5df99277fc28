-- Resolve: a task waiting on parents becomes ready when every parent succeeded, is cancelled
-- (dependency_failed:<parent>) when one ended otherwise or is gone, or else keeps waiting.
-- From: PENDING
-- To: PENDING, CANCELLED
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of);
--   KEYS[T+1..T+2n]: each parent's hash and children set, in the order of ARGV[7..6+n]
-- ARGV[1..4]: engine config; ARGV[5]: task id; ARGV[6]: n, the number of parents;
--   ARGV[7..6+n]: the parents' ids, as the task lists them
-- Returns: {OK, 'ready' | 'delayed' | 'cancelled'} ('delayed': ready, but its submit's delay has not
--   passed yet; the sweeper dispatches it then) | {NOT_DUE} when a parent is still running (the task waits,
--   registered with it) or the task is not waiting | {NOT_FOUND}
local n = tonumber(ARGV[6])
local t = load_listed(K.task, K.waiting, ARGV[5])
if not t then return {C.NOT_FOUND} end
local now = now_ms()
if t.status ~= 'PENDING' or t.waiting_on ~= '1' or (t.parents or '') ~= table.concat(ARGV, ',', 7, 6 + n) then
  redis.call('ZREM', K.waiting, t.id)
  return {C.NOT_DUE}
end

local open, failed = false, nil
for i = 1, n do
  local status = redis.call('HGET', KEYS[T + 2 * i - 1], 'status')
  if not status or (TERMINAL[status] and status ~= 'SUCCESS') then
    failed = failed or ARGV[6 + i]
  elseif status ~= 'SUCCESS' then
    open = true
  end
end

if failed then
  local reason = 'dependency_failed:' .. failed
  change(K, t, 'resolve', 'CANCELLED', now, 0,
    {error_kind = 'dependency_failed', reason = reason, waiting_on = ''}, {reason = reason})
  return finish({C.OK, 'cancelled'})
end
if open then
  -- Registered with every open parent (again: an edited task is new to them); looked at again
  -- when one ends, or after RECHECK_MS at the latest.
  for i = 1, n do redis.call('SADD', KEYS[T + 2 * i], t.id) end
  redis.call('ZADD', K.waiting, now + RECHECK_MS, t.id)
  return {C.NOT_DUE}
end
t.waiting_on = ''
-- Dispatched now, or when the delay it was submitted with has passed (the sweeper then does it).
local at = math.max(now, tonumber(t.not_before or 0))
change(K, t, 'resolve', 'PENDING', now, at, {waiting_on = ''}, {reason = 'dependencies met'})
return {C.OK, at > now and 'delayed' or 'ready'}
