-- Edit: in one step, cancels a task that has not ended and submits its replacement with new
-- arguments, the two linked both ways (superseded_by / supersedes).
-- From: PENDING, QUEUED, PROCESSING, RETRY_WAITING
-- To: CANCELLED, PENDING
-- KEYS[1..T]: the old task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of);
--   KEYS[T+1..2T]: the new task's keys; KEYS[2T+1..2T+3]: the owner's task index (keys.py IndexKeys:
--   head, pages, page); KEYS[2T+4]: the owner's submit-rate key (only with a quota, ARGV[9] ~= '')
-- ARGV[1..4]: engine config; ARGV[5]: who asks; ARGV[6]: '1' if admin; ARGV[7]: new task id;
--   ARGV[8]: new args JSON; ARGV[9]: the owner's quota (lib/quota; '' or absent = none): an edit counts as a
--   submit against its rate, and its args replace the old task's in the unfinished bytes
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, new id, now, 'resolve' when the new task waits on parents, 'delayed' while the
--   request's delay has not passed, else ''} | {REPLAYED, new id} when this edit already happened | {NOT_FOUND}
--   (also for a task of another owner) | {ILLEGAL_TRANSITION, state} |
--   {QUOTA_EXCEEDED, limit, ms to wait, owner} when the owner's quota refuses it (lib/quota)
local by, admin, new_id = ARGV[5], ARGV[6], ARGV[7]
local N = taskkeys(T)
local t = load_task(K.task)
if not visible(t, by, admin) then return {C.NOT_FOUND} end
if t.superseded_by == new_id then return {replay(K), new_id} end
if not LEGAL.edit[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end

local now = now_ms()
local quota = ARGV[9] or ''
local rate_key = quota ~= '' and KEYS[2 * T + 4] or nil
local refused, rate_state = quota_check(K, rate_key, t.owner, quota, 0,
  #ARGV[8] - #(body_args(K) or ''), now)
if refused then return refused end
quota_charge(rate_key, rate_state, now)
-- The replacement waits on the same parents; the engine resolves it at once (which registers it
-- with them).
local waiting = t.waiting_on == '1' and '1' or nil
-- Read before the cancel: a CANCELLED task keeps no attempt settings (lib/record: ATTEMPT_SETTINGS).
local lease_ms, timeout_ms, backoff = t.lease_ms, t.timeout_ms, t.backoff
change(K, t, 'edit', 'CANCELLED', now, 0,
  {reason = 'superseded by ' .. new_id, error_kind = 'cancelled',
   cancelled_by = by, superseded_by = new_id, next_retry_at = '', waiting_on = ''},
  {by = by, reason = 'superseded by ' .. new_id})
-- The request's delay, due times and expiry carry over, and so does what was recorded of them (an
-- overdue request is not recorded overdue twice). A claim cleared the expiry of a task it started.
local delay_ms = math.max(0, tonumber(t.not_before or 0) - now)
create(N, index_at(2 * T + 1), {id = new_id, type = t.type, owner = t.owner, queue = t.queue, supersedes = t.id,
  max_attempts = t.max_attempts, lease_ms = lease_ms, timeout_ms = timeout_ms,
  priority = t.priority, backoff = backoff, due_at = t.due_at, escalate_at = t.escalate_at,
  overdue_at = t.overdue_at, escalated_at = t.escalated_at, not_before = t.not_before,
  parents = t.parents, waiting_on = waiting, notify_url = t.notify_url, expires_at = t.expires_at},
  ARGV[8], now, delay_ms, {by = by, reason = 'edit of ' .. t.id}, waiting and now or nil)
return finish({C.OK, new_id, now, waiting and 'resolve' or (delay_ms > 0 and 'delayed' or '')})
