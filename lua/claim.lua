-- Claim: a worker takes the task's lease and starts an attempt with a new fencing token.
-- The lease is (token, claim id): holder calls must carry both (lib/lease: check_lease), so a
-- claim lost in a failover cannot share a lease with the next claim that counts to its token.
-- A job's delivery (ARGV[7]) takes the queue's next task: the head of its ready line, when it is of a
-- higher priority than the task the job was made for or returns from a lost attempt (within a
-- priority, jobs keep dispatch order as RQ's do), this worker runs its type with the settings given,
-- and its timeout fits the job's (ARGV[15]). The task passed over keeps its place in line but no
-- longer has a job: the engine dispatches it again at once, at the front of RQ's queue
-- (lua/dispatch.lua keeps a passed task's place); until then its re-dispatch deadline is the dispatch
-- grace, so the sweeper does it if the worker dies first. One RQ queue per queue, priorities strict
-- (engine/core/priority.py). Every key is passed: MOVED names the head whose keys the claim needs,
-- and the engine claims again with them and its type's settings.
-- From: PENDING, QUEUED
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: worker name; ARGV[6]: claim id (unique per call);
--   ARGV[7]: dispatch id the job was made for ('' = a direct claim of this task, no other);
--   ARGV[8]: task types this worker runs, as ',a,b,' ('' = any);
--   ARGV[9]: the breaker settings of type ARGV[11] (lib/breaker: breaker_cfg; '' = none);
--   ARGV[10]: its upstream's rate limit (lib/limit: limit_cfg; '' or absent = none);
--   KEYS[T+1]: the breaker's hash (with ARGV[9]); then, with ARGV[10], the limit's start log
--   and its parked set (lib/limit);
--   ARGV[11]: the type ARGV[9..10] are for ('' = none); ARGV[12]: the types of ARGV[8] that have
--   neither a breaker nor a rate limit, as ',a,b,' ('' = all of them);
--   ARGV[13]: the head of the ready line whose own keys (keys.py TASK_OWN_KEYS) follow ('' = none);
--   ARGV[14]: '1' for a last try: no MOVED to a head other than ARGV[13];
--   ARGV[15]: the longest attempt timeout (ms) the job allows ('' = that of the job's own task)
-- Passed over: the task's `passed` is '<claim id> <head id>' until it is dispatched again or leaves QUEUED
-- Instead: lapse when the task's expiry (submit's expires_in) has passed: CANCELLED, reason expired
-- Returns: {OK, token, attempt, args JSON, type, lease ms, max attempts, checkpoints (flat), task id,
--   task passed over or '', its traceparent or ''} | {MOVED, head id}: nothing changed; claim again with the head's keys |
--   {MOVED, '', type}: nothing changed; claim the job's own task with the settings of its type |
--   {REPLAYED, ...as OK} for a resent claim |
--   {NOT_FOUND} | {ILLEGAL_TRANSITION, state} |
--   {NOT_DUE, why} while it waits on its parents or its submit's delay has not passed |
--   {WRONG_DISPATCH, state} for a delivery of a dispatch that is no longer current |
--   {UNKNOWN_TYPE, type} when this worker does not run the task's type |
--   {BREAKER_OPEN, ms to wait, task id, task passed over or nil} when the upstream's breaker is open
--   (nothing changed but the passing over: park that task) |
--   {RATE_LIMITED, ms to wait, task id, task passed over or nil} when the upstream's rate limit has
--   no start left now (the same; the wait is when its slot frees) |
--   {EXPIRED, task id} when it found the task expired and cancelled it (lapse)
local worker, claim_id, dispatch_id, types = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local cfg_type, free = ARGV[11] or '', ARGV[12] or ''
local head_id, last_try = ARGV[13] or '', ARGV[14] == '1'
local function runs(type_name)
  return types == '' or string.find(types, ',' .. type_name .. ',', 1, true) ~= nil
end
local function settings_given(type_name)  -- its breaker and limit, if it has any, are ARGV[9..10]
  return type_name == cfg_type or free == '' or string.find(free, ',' .. type_name .. ',', 1, true) ~= nil
end
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local function lease_reply(code, passed)
  return {code, t.token, t.attempt, body_args(K), t.type, t.lease_ms, t.max_attempts,
    redis.call('HGETALL', K.checkpoints), t.id, passed or '', t.traceparent or ''}
end
if t.status == 'PROCESSING' and t.claim_id == claim_id then return lease_reply(replay(K)) end
if t.passed and dispatch_id ~= '' and t.dispatch_id == dispatch_id then  -- a resent claim that took the head?
  local by, hid = string.match(t.passed, '^(%S+) (%S+)$')
  if by == claim_id then
    if hid ~= head_id then return {C.MOVED, hid} end
    local KH = keys_at(#KEYS - OWN_KEYS)
    local h = load_task(KH.task)
    if h and h.status == 'PROCESSING' and h.claim_id == claim_id then
      local own = t.id  -- still passed over: not dispatched again yet (the reply was lost)
      K, t = KH, h
      return lease_reply(replay(K), own)
    end
  end
end
if not LEGAL.claim[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end
local now = now_ms()
if lapsed(t, now) then  -- not started in time: the user has gone; it never starts
  lapse_now(K, t, now)
  return finish({C.EXPIRED, t.id})
end
if t.waiting_on == '1' then return {C.NOT_DUE, 'waiting on its parents'} end
if tonumber(t.not_before or 0) > now then return {C.NOT_DUE, 'delayed'} end  -- submitted with a delay
if dispatch_id ~= '' and dispatch_id ~= t.dispatch_id then return {C.WRONG_DISPATCH, t.status} end
-- (a job of a task passed over, delivered again: it holds the dispatch until it is dispatched again)

-- Ahead in the ready line (score -priority * PRIORITY_SPAN + sequence): of a higher priority, or of
-- the same and returning from a lost attempt (a sequence below PRIORITY_SPAN / 2) when `of` is not.
local function ahead(score, of)
  local band, band_of = math.floor(score / PRIORITY_SPAN), math.floor(of / PRIORITY_SPAN)
  if band ~= band_of then return band < band_of end
  return score - band * PRIORITY_SPAN < PRIORITY_SPAN / 2 and of - band_of * PRIORITY_SPAN >= PRIORITY_SPAN / 2
end
local room = tonumber(ARGV[15] or '') or t.timeout_ms
local function fits(h)  -- a head this job may start: a job's timeout is RQ's limit on its attempt
  return h and h.status == 'QUEUED' and runs(h.type) and settings_given(h.type) and not lapsed(h, now)
    and h.timeout_ms <= room
end
local passed
if dispatch_id ~= '' and t.status == 'QUEUED' and not t.passed then
  local first = redis.call('ZRANGE', K.ready, 0, 0, 'WITHSCORES')
  local score = tonumber(redis.call('ZSCORE', K.ready, t.id) or '')
  if first[1] and first[1] ~= t.id and score and ahead(tonumber(first[2]), score) then
    if first[1] ~= head_id then
      if not last_try then return {C.MOVED, first[1]} end  -- (a last try starts its own task)
    else
      local KH = keys_at(#KEYS - OWN_KEYS)
      local h = load_task(KH.task)
      if fits(h) then
        -- Passed over: it keeps its place and its (spent) dispatch until the engine dispatches it again.
        save_task(K.task, t, {passed = claim_id .. ' ' .. h.id})
        redis.call('ZADD', K.dispatch, now + CFG.dispatch_grace_ms, t.id)
        passed = t.id
        K, t = KH, h
      end
    end
  end
end
if not runs(t.type) then return {C.UNKNOWN_TYPE, t.type} end
if not settings_given(t.type) then return {C.MOVED, '', t.type} end  -- the settings given were the head's

local cfg, limit
if t.type == cfg_type then cfg, limit = breaker_cfg(ARGV[9]), limit_cfg(ARGV[10]) end
local L, P = KEYS[T + (cfg and 2 or 1)], KEYS[T + (cfg and 3 or 2)]
-- The limit first: it writes nothing but its pruning, while a half-open breaker's gate picks
-- this task as its probe.
if limit then
  local until_ms = limit_gate(L, P, t.id, now, limit)
  if until_ms then return {C.RATE_LIMITED, until_ms - now, t.id, passed} end
end
if cfg then
  local until_ms = breaker_gate(KEYS[T + 1], t, now, cfg.cooldown_ms)
  if until_ms then return {C.BREAKER_OPEN, until_ms - now, t.id, passed} end
end
local token = t.token + 1
if limit then limit_take(L, P, t, token, now, limit) end
local lease_until = now + t.lease_ms
local attempt_deadline = now + t.timeout_ms
change(K, t, 'claim', 'PROCESSING', now, math.min(lease_until, attempt_deadline), {
  token = token, attempt = t.attempt + 1, worker = worker, claim_id = claim_id,
  dispatch_id = '', started_at = now, lease_until = lease_until,
  attempt_deadline = attempt_deadline, stage = '', stage_deadline = 0, stage_since = now,
  ended_token = '', ended_by = '', next_retry_at = '', returning = '', expires_at = ''},
  {worker = worker, token = token, attempt = t.attempt + 1, stage = ''})
return lease_reply(C.OK, passed)
