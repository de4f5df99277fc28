-- Submit: creates a task in PENDING, or returns the task an idempotency key already names.
-- From: (none)
-- To: PENDING
-- KEYS[1..T]: the new task's keys (T = the fields of engine/keys.py TaskKeys);
--   KEYS[T+1]: the owner's task index; KEYS[T+2..T+1+2n]: each parent's hash and children set
--   (n = ARGV[23]); KEYS[T+2+2n]: the owner's submit-rate key (only with a quota, ARGV[22] ~= '');
--   then the idempotency key (optional)
-- ARGV[1..4]: engine config; ARGV[5]: task id; ARGV[6]: type; ARGV[7]: owner;
--   ARGV[8]: args JSON; ARGV[9]: digest of type + args; ARGV[10]: max attempts;
--   ARGV[11]: lease ms; ARGV[12]: attempt timeout ms; ARGV[13]: priority; ARGV[14]: delay ms;
--   ARGV[15]: backoff spec (lib/backoff); ARGV[16]: idempotency key TTL ms; ARGV[17]: idempotency key as given;
--   ARGV[18]: queue; ARGV[19]: ms from now the task is due (0 = no due time);
--   ARGV[20]: ms from now it escalates if still unfinished (0 = never);
--   ARGV[21]: webhook URL for its notifications ('' = none);
--   ARGV[22]: the owner's quota (lib/quota; '' = none);
--   ARGV[23]: n, the number of parents it waits on; ARGV[24..23+n]: their ids
-- Returns: {OK, id, now, waiting} (waiting: '' | 'waiting' | 'resolve' when a parent already ended
--   otherwise than SUCCESS) | {REPLAYED, id} when the id or the key already exists with the same
--   arguments | {IDEMPOTENCY_CONFLICT, id} when the key names a task with other arguments |
--   {UNKNOWN_PARENT, id} when a parent does not exist |
--   {QUOTA_EXCEEDED, limit, ms to wait, owner} when the owner's quota refuses it (lib/quota)
local id, digest = ARGV[5], ARGV[9]
local n = tonumber(ARGV[23])
local quota = ARGV[22]
local rate_key = quota ~= '' and KEYS[T + 2 + 2 * n] or nil
local idem = KEYS[T + 2 + 2 * n + (rate_key and 1 or 0)]

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

-- Parents exist before their child, so no cycle can form. Each is checked before any write.
local open, failed = {}, false
for i = 1, n do
  local status = redis.call('HGET', KEYS[T + 2 * i], 'status')
  if not status then return {C.UNKNOWN_PARENT, ARGV[23 + i]} end
  if not TERMINAL[status] then open[#open + 1] = KEYS[T + 1 + 2 * i]
  elseif status ~= 'SUCCESS' then failed = true end
end

local now = now_ms()
local refused, rate_state = quota_check(K, rate_key, ARGV[7], quota, 1, #ARGV[8], now)
if refused then return refused end
local waiting = (#open > 0 or failed) and '1' or nil
local due = nil
if waiting then due = failed and now or now + RECHECK_MS end
local due_ms, escalate_ms = tonumber(ARGV[19]), tonumber(ARGV[20])
create(K, KEYS[T + 1], {id = id, due_at = due_ms > 0 and now + due_ms or nil,
  escalate_at = escalate_ms > 0 and now + escalate_ms or nil, type = ARGV[6], owner = ARGV[7], queue = ARGV[18],
  max_attempts = ARGV[10], lease_ms = ARGV[11], timeout_ms = ARGV[12], priority = ARGV[13],
  backoff = ARGV[15], idempotency_key = ARGV[17] ~= '' and ARGV[17] or nil, waiting_on = waiting,
  parents = n > 0 and table.concat(ARGV, ',', 24, 23 + n) or nil, notify_url = ARGV[21] ~= '' and ARGV[21] or nil,
  -- Its delay holds through waiting on parents (lua/resolve.lua), an edit and a direct claim.
  not_before = tonumber(ARGV[14]) > 0 and now + tonumber(ARGV[14]) or nil},
  ARGV[8], now, tonumber(ARGV[14]), {by = ARGV[7]}, due)
quota_charge(rate_key, rate_state, now)
for _, children in ipairs(open) do redis.call('SADD', children, id) end
if idem then
  redis.call('HSET', idem, 'id', id, 'digest', digest)
  redis.call('PEXPIRE', idem, ARGV[16])
end
return {C.OK, id, now, failed and 'resolve' or (waiting and 'waiting' or '')}
