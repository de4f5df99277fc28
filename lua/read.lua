-- Read: a read-only, atomic look at tasks of one queue that checks the owner before anything else.
-- From: (none)
-- To: (none)
-- KEYS[1..T*n]: the keys of n tasks of one queue (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of), task after task
-- ARGV[1..4]: engine config; ARGV[5]: '1' when anyone's task may be seen, else '0'; ARGV[6]: the owner
--   whose tasks may be seen; ARGV[7]: '1' to add history and the queue's newest event id;
--   ARGV[8..7+n]: the task ids
-- Returns: {OK, then per task: {} when missing or another owner's (then nothing but its hash is read),
--   else {hash as a flat list, args JSON or false, result JSON or false, place in the ready line or
--   false[, history entries, the queue stream's newest id or '0-0']}}
-- Read-only and never writing, it runs on a Redis at maxmemory (which refuses MULTI/EXEC).
local out = {C.OK}
for i = 1, #KEYS / T do
  local k = taskkeys((i - 1) * T)
  local flat = redis.call('HGETALL', k.task)
  local owner = false
  for j = 1, #flat, 2 do
    if flat[j] == 'owner' then owner = flat[j + 1] end
  end
  if #flat == 0 or (ARGV[5] ~= '1' and owner ~= ARGV[6]) then
    out[#out + 1] = {}
  else
    local e = {flat, body_args(k), body_result(k), redis.call('ZRANK', k.ready, ARGV[7 + i])}
    if ARGV[7] == '1' then
      e[5] = body_history(k)
      local last = redis.call('XREVRANGE', k.events, '+', '-', 'COUNT', 1)
      e[6] = last[1] and last[1][1] or '0-0'
    end
    out[#out + 1] = e
  end
end
return out
