-- Park: a task whose upstream takes no attempt now waits (RETRY_WAITING) without consuming an
-- attempt: its circuit breaker is open (reason upstream_open; or FAILED at once when its type's
-- breaker policy is to fail fast), or its rate limit has no start left (reason rate_limited).
-- From: PENDING, QUEUED
-- To: RETRY_WAITING, FAILED
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of);
--   KEYS[T+1], KEYS[T+2]: the limit's start log and parked set (lib/limit; only with ARGV[10])
-- ARGV[1..4]: engine config; ARGV[5]: ms to wait (when to try again; rate_limited: the claim's
--   estimate, as the park finds the task's start slot itself, on its own clock); ARGV[6]: '1' to fail fast;
--   ARGV[7]: upstream name; ARGV[8]: park id (unique per call);
--   ARGV[9]: why, 'upstream_open' or 'rate_limited' ('' or absent: upstream_open);
--   ARGV[10]: the rate limit (lib/limit: limit_cfg) when rate_limited
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, state} | {REPLAYED, state} for a resent call | {NOT_FOUND} |
--   {ILLEGAL_TRANSITION, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
if t.park_id == ARGV[8] then return {replay(K), t.status} end
if not LEGAL.park[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end

local now = now_ms()
local kind = (ARGV[9] or '') ~= '' and ARGV[9] or 'upstream_open'
local limit = kind == 'rate_limited' and limit_cfg(ARGV[10]) or nil
local reason = kind .. ': ' .. ARGV[7]
redis.call('HINCRBY', K.stats, 'parked', 1)
if ARGV[6] == '1' and not limit then
  change(K, t, 'park', 'FAILED', now, 0,
    {error_kind = kind, reason = reason, dispatch_id = '', park_id = ARGV[8]}, {reason = reason})
else
  local at = now + tonumber(ARGV[5])
  if limit then
    at = limit_gate(KEYS[T + 1], KEYS[T + 2], t.id, now, limit) or now  -- a slot freed since the claim: now
    redis.call('HINCRBY', K.stats, 'rate_parked:' .. limit.name, 1)
    limit_park(KEYS[T + 2], t.id, at, now, limit)
  end
  change(K, t, 'park', 'RETRY_WAITING', now, at,
    {next_retry_at = at, error_kind = kind, reason = reason, dispatch_id = '',
     park_id = ARGV[8]}, {reason = reason})
end
return finish({C.OK, t.status})
