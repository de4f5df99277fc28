-- Claim: a worker takes the task's lease and starts an attempt with a new fencing token.
-- The lease is (token, claim id): holder calls must carry both (lib/lease: check_lease), so a
-- claim lost in a failover cannot share a lease with the next claim that counts to its token.
-- From: PENDING, QUEUED
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T = the fields of engine/keys.py TaskKeys)
-- ARGV[1..4]: engine config; ARGV[5]: worker name; ARGV[6]: claim id (unique per call);
--   ARGV[7]: dispatch id the job was made for ('' = any);
--   ARGV[8]: task types this worker runs, as ',a,b,' ('' = any);
--   ARGV[9]: the type's circuit breaker settings (lib/breaker: breaker_cfg; '' = none);
--   ARGV[10]: the upstream's rate limit (lib/limit: limit_cfg; '' or absent = none);
--   KEYS[T+1]: the breaker's hash (with ARGV[9]); then, with ARGV[10], the limit's start log
--   and its parked set (lib/limit)
-- Instead: lapse when the task's expiry (submit's expires_in) has passed: CANCELLED, reason expired
-- Returns: {OK, token, attempt, args JSON, type, lease ms, max attempts, checkpoints (flat)} |
--   {REPLAYED, ...the same} for a resent claim |
--   {NOT_FOUND} | {ILLEGAL_TRANSITION, state} |
--   {NOT_DUE, why} while it waits on its parents or its submit's delay has not passed |
--   {WRONG_DISPATCH, state} for a delivery of a dispatch that is no longer current |
--   {UNKNOWN_TYPE, type} when this worker does not run the task's type |
--   {BREAKER_OPEN, ms to wait} when the upstream's breaker is open (nothing changed: park it) |
--   {RATE_LIMITED, ms to wait} when the upstream's rate limit has no start left now (nothing
--   changed: park it; the wait is when its slot frees) |
--   {EXPIRED} when it found the task expired and cancelled it (lapse)
local worker, claim_id, dispatch_id, types = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local function lease_reply(code)
  return {code, t.token, t.attempt, body_args(K), t.type, t.lease_ms, t.max_attempts,
    redis.call('HGETALL', K.checkpoints)}
end
if t.status == 'PROCESSING' and t.claim_id == claim_id then return lease_reply(C.REPLAYED) end
if not LEGAL.claim[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end
local now = now_ms()
if lapsed(t, now) then  -- not started in time: the user has gone; it never starts
  lapse_now(K, t, now)
  return finish({C.EXPIRED})
end
if t.waiting_on == '1' then return {C.NOT_DUE, 'waiting on its parents'} end
if tonumber(t.not_before or 0) > now then return {C.NOT_DUE, 'delayed'} end  -- submitted with a delay
if dispatch_id ~= '' and dispatch_id ~= t.dispatch_id then return {C.WRONG_DISPATCH, t.status} end
if types ~= '' and not string.find(types, ',' .. t.type .. ',', 1, true) then
  return {C.UNKNOWN_TYPE, t.type}
end

local cfg, limit = breaker_cfg(ARGV[9]), limit_cfg(ARGV[10])
local L, P = KEYS[T + (cfg and 2 or 1)], KEYS[T + (cfg and 3 or 2)]
-- The limit first: it writes nothing but its pruning, while a half-open breaker's gate picks
-- this task as its probe.
if limit then
  local until_ms = limit_gate(L, P, t.id, now, limit)
  if until_ms then return {C.RATE_LIMITED, until_ms - now} end
end
if cfg then
  local until_ms = breaker_gate(KEYS[T + 1], t, now, cfg.cooldown_ms)
  if until_ms then return {C.BREAKER_OPEN, until_ms - now} end
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
return lease_reply(C.OK)
