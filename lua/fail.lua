-- Fail: the lease holder reports a failed attempt; retried with backoff while attempts remain.
-- From: PROCESSING
-- To: RETRY_WAITING, FAILED
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id; ARGV[7]: error kind;
--   ARGV[8]: reason; ARGV[9]: '1' if retryable else '0'; ARGV[10]: random number in [0, 1) for
--   jitter; ARGV[11]: worker name; ARGV[12]: retry delay ms overriding the backoff policy ('' =
--   policy; 0 when the worker, not the task, failed); ARGV[13]: circuit breaker settings when this failure
--   counts against the upstream (lib/breaker; '' = it does not); KEYS[T+1]: the breaker's hash
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, state, version} | {REPLAYED, state, version} for a repeat with the same token |
--   {NOT_FOUND} | {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local token, claim, kind, reason = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local refused = check_lease(K, t, 'fail', token, claim, ARGV[11], now, true)
if refused then return refused end

redis.call('HINCRBY', K.stats, 'fail:' .. kind, 1)
breaker_outcome(K, KEYS[T + 1], t, false, now, breaker_cfg(ARGV[13]))
local fields = {error_kind = kind, reason = reason, ended_token = token, ended_by = 'fail',
  returning = kind == 'worker_lost' and '1' or ''}  -- the head of its line at its next dispatch
local ev = {worker = ARGV[11], reason = kind .. ': ' .. reason}
if ARGV[9] == '1' and t.attempt < t.max_attempts then
  local delay = tonumber(ARGV[12]) or backoff_ms(t.backoff, t.attempt, tonumber(ARGV[10]))
  local at = now + delay
  fields.next_retry_at = at
  change(K, t, 'fail', 'RETRY_WAITING', now, at, fields, ev)
else
  change(K, t, 'fail', 'FAILED', now, 0, fields, ev)
end
return finish({C.OK, t.status, t.version})
