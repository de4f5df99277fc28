-- Submit: creates a task in PENDING, or returns the task an idempotency key already names.
-- From: (none)
-- To: PENDING
-- KEYS[1..T]: the new task's keys (T = the fields of engine/keys.py TaskKeys);
--   KEYS[T+1]: the owner's task index; KEYS[T+2]: idempotency key (optional)
-- ARGV[1..4]: engine config (lib/config); ARGV[5]: task id; ARGV[6]: type; ARGV[7]: owner;
--   ARGV[8]: args JSON; ARGV[9]: digest of type + args; ARGV[10]: max attempts;
--   ARGV[11]: lease ms; ARGV[12]: attempt timeout ms; ARGV[13]: priority; ARGV[14]: delay ms;
--   ARGV[15]: backoff spec (lib/backoff); ARGV[16]: idempotency key TTL ms; ARGV[17]: idempotency key as given;
--   ARGV[18]: queue; ARGV[19]: ms from now the task is due (0 = no due time);
--   ARGV[20]: ms from now it escalates if still unfinished (0 = never)
-- Returns: {OK, id, now} | {REPLAYED, id} when the id or the key already exists with the same
--   arguments | {IDEMPOTENCY_CONFLICT, id} when the key names a task with other arguments
local id, digest = ARGV[5], ARGV[9]
local idem = KEYS[T + 2]

-- A resent submit (lost reply) finds its own task.
if redis.call('EXISTS', K.task) == 1 then return {C.REPLAYED, id} end

-- The key outlives no task: Config keeps its TTL within the terminal retention.
if idem then
  local existing = redis.call('HMGET', idem, 'id', 'digest')
  if existing[1] then
    if existing[2] == digest then return {C.REPLAYED, existing[1]} end
    return {C.IDEMPOTENCY_CONFLICT, existing[1]}
  end
end

local now = now_ms()
local due_ms, escalate_ms = tonumber(ARGV[19]), tonumber(ARGV[20])
create(K, KEYS[T + 1], {id = id, due_at = due_ms > 0 and now + due_ms or nil,
  escalate_at = escalate_ms > 0 and now + escalate_ms or nil, type = ARGV[6], owner = ARGV[7], queue = ARGV[18],
  max_attempts = ARGV[10], lease_ms = ARGV[11], timeout_ms = ARGV[12], priority = ARGV[13],
  backoff = ARGV[15], idempotency_key = ARGV[17] ~= '' and ARGV[17] or nil},
  ARGV[8], now, tonumber(ARGV[14]), {by = ARGV[7]})
if idem then
  redis.call('HSET', idem, 'id', id, 'digest', digest)
  redis.call('PEXPIRE', idem, ARGV[16])
end
return {C.OK, id, now}
