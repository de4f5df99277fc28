-- Park: a task whose upstream's circuit breaker is open waits (RETRY_WAITING, reason upstream_open)
-- without consuming an attempt, or fails at once when its type's breaker policy is to fail fast.
-- From: PENDING, QUEUED
-- To: RETRY_WAITING, FAILED
-- KEYS[1..T]: the task's keys (T = the fields of engine/keys.py TaskKeys)
-- ARGV[1..4]: engine config; ARGV[5]: ms to wait (when to try again); ARGV[6]: '1' to fail fast;
--   ARGV[7]: upstream name; ARGV[8]: park id (unique per call)
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, state} | {REPLAYED, state} for a resent call | {NOT_FOUND} |
--   {ILLEGAL_TRANSITION, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
if t.park_id == ARGV[8] then return {C.REPLAYED, t.status} end
if not LEGAL.park[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end

local now = now_ms()
local reason = 'upstream_open: ' .. ARGV[7]
redis.call('HINCRBY', K.stats, 'parked', 1)
if ARGV[6] == '1' then
  change(K, t, 'park', 'FAILED', now, 0,
    {finished_at = now, error_kind = 'upstream_open', reason = reason, dispatch_id = '', park_id = ARGV[8]}, {reason = reason})
else
  local at = now + tonumber(ARGV[5])
  change(K, t, 'park', 'RETRY_WAITING', now, at,
    {next_retry_at = at, error_kind = 'upstream_open', reason = reason, dispatch_id = '',
     park_id = ARGV[8]}, {reason = reason})
end
return finish({C.OK, t.status})
