-- Submit: creates a task in PENDING, or returns the task an idempotency key already names.
-- From: (none)
-- To: PENDING
-- KEYS[1..T]: the new task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of);
--   KEYS[T+1..T+3]: the owner's task index (keys.py IndexKeys: head, pages, page); KEYS[T+4..T+3+2n]:
--   each parent's hash and children set (n = n_parents); KEYS[T+4+2n]: the owner's submit-rate key
--   (only with a quota ~= ''); then the idempotency key (optional)
-- ARGV[1..4]: engine config; ARGV[5..24]: bound below, one local each, named as the fields of
--   engine/core/scripts.py SubmitArgs, in their order (tests/engine/test_scripts_wrappers.py checks it);
--   ARGV[25]: n_parents, the number of parents it waits on; ARGV[26..25+n_parents]: their ids
-- Returns: {OK, id, now, waiting} (waiting: '' | 'waiting' | 'resolve' when a parent already ended
--   otherwise than SUCCESS) | {REPLAYED, id} when the id or the key already exists with the same
--   arguments | {IDEMPOTENCY_CONFLICT, id} when the key names a task with other arguments |
--   {UNKNOWN_PARENT, id} when a parent does not exist |
--   {QUOTA_EXCEEDED, limit, ms to wait, owner} when the owner's quota refuses it (lib/quota)
local task_id = ARGV[5]
local type_name = ARGV[6]
local owner = ARGV[7]
local args_json = ARGV[8]
local digest = ARGV[9]  -- of type + args
local max_attempts = ARGV[10]
local lease_ms = ARGV[11]
local timeout_ms = ARGV[12]  -- of an attempt
local priority = ARGV[13]
local delay_ms = tonumber(ARGV[14])
local backoff = ARGV[15]  -- lib/backoff spec
local idempotency_ttl_ms = ARGV[16]
local idempotency_key = ARGV[17]  -- as given ('' = none)
local queue = ARGV[18]
local due_ms = tonumber(ARGV[19])  -- from now the task is due (0 = no due time)
local escalate_ms = tonumber(ARGV[20])  -- from now it escalates if still unfinished (0 = never)
local notify_url = ARGV[21]  -- for its notifications ('' = none)
local quota = ARGV[22]  -- the owner's (lib/quota; '' = none)
local expires_ms = tonumber(ARGV[23])  -- from now it is cancelled (expired) unless started (0 = never)
local traceparent = ARGV[24]  -- W3C, of the submit's span ('' = none)
local n_parents = tonumber(ARGV[25])
local O = T + 3  -- the owner's index keys end here
local rate_key = quota ~= '' and KEYS[O + 1 + 2 * n_parents] or nil
local idem = KEYS[O + 1 + 2 * n_parents + (rate_key and 1 or 0)]

-- A resent submit (lost reply) finds its own task.
if redis.call('EXISTS', K.task) == 1 then return {replay(K), task_id} end

-- The key outlives no task: Config keeps its TTL within the terminal retention.
if idem then
  local existing = redis.call('HMGET', idem, 'id', 'digest')
  if existing[1] then
    if existing[2] == digest then return {replay(K), existing[1]} end
    return {C.IDEMPOTENCY_CONFLICT, existing[1]}
  end
end

-- Parents exist before their child, so no cycle can form. Each is checked before any write.
local open, failed = {}, false
for i = 1, n_parents do
  local status = redis.call('HGET', KEYS[O + 2 * i - 1], 'status')
  if not status then return {C.UNKNOWN_PARENT, ARGV[25 + i]} end
  if not TERMINAL[status] then open[#open + 1] = KEYS[O + 2 * i]
  elseif status ~= 'SUCCESS' then failed = true end
end

local now = now_ms()
local refused, rate_state = quota_check(K, rate_key, owner, quota, 1, #args_json, now)
if refused then return refused end
local waiting = (#open > 0 or failed) and '1' or nil
local due = nil
if waiting then due = failed and now or now + RECHECK_MS end
create(K, index_at(T + 1), {id = task_id, due_at = due_ms > 0 and now + due_ms or nil,
  escalate_at = escalate_ms > 0 and now + escalate_ms or nil, type = type_name, owner = owner, queue = queue,
  max_attempts = max_attempts, lease_ms = lease_ms, timeout_ms = timeout_ms,
  priority = priority ~= '0' and priority or nil,  -- absent: 0
  backoff = backoff, idempotency_key = idempotency_key ~= '' and idempotency_key or nil, waiting_on = waiting,
  parents = n_parents > 0 and table.concat(ARGV, ',', 26, 25 + n_parents) or nil,
  expires_at = expires_ms > 0 and now + expires_ms or nil,
  notify_url = notify_url ~= '' and notify_url or nil, traceparent = traceparent ~= '' and traceparent or nil,
  -- Its delay holds through waiting on parents (lua/resolve.lua), an edit and a direct claim.
  not_before = delay_ms > 0 and now + delay_ms or nil},
  args_json, now, delay_ms, {by = owner}, due)
quota_charge(rate_key, rate_state, now)
for _, children in ipairs(open) do redis.call('SADD', children, task_id) end
if idem then
  redis.call('HSET', idem, 'id', task_id, 'digest', digest)
  redis.call('PEXPIRE', idem, idempotency_ttl_ms)
end
return {C.OK, task_id, now, failed and 'resolve' or (waiting and 'waiting' or '')}
