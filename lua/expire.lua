-- Expire: the sweeper reclaims a task whose lease, stage or attempt deadline has passed (or an
-- admin reclaims a stuck task now).
-- From: PROCESSING
-- To: TIMEOUT, RETRY_WAITING
-- Then: promote, in the same call, when the retry is due at once (a lost heartbeat, an admin's
--   reclaim): RETRY_WAITING -> PENDING, recorded as promote (lib/record: promote_now)
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: random number in [0, 1) for backoff jitter;
--   ARGV[6]: the admin reclaiming it now, whatever its deadlines ('' = the sweeper)
-- Ends: a reply may end with '!resolve' when tasks waiting on this one are due (lib/record: finish)
-- Returns: {OK, state, reason} (state: TIMEOUT, RETRY_WAITING, or PENDING when promoted) |
--   {NOT_DUE} when the deadline has not passed or the task left PROCESSING meanwhile
--   (compare-and-set lost; several sweepers may race) | {NOT_FOUND}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
if t.status ~= 'PROCESSING' then return {C.NOT_DUE} end
local now = now_ms()
local by = ARGV[6] or ''
if by == '' and lease_deadline(t) > now then return {C.NOT_DUE} end

local reason = 'heartbeat_lost'
if by ~= '' then
  reason = 'reclaimed by ' .. by
elseif t.attempt_deadline <= now then
  reason = 'attempt_timeout'
elseif t.stage_deadline > 0 and t.stage_deadline <= now then
  reason = 'stage_timeout:' .. t.stage
end
-- PROCESSING -> TIMEOUT is always recorded, so the history says why the attempt ended.
local retries = t.attempt < t.max_attempts
change(K, t, 'expire', 'TIMEOUT', now, 0,
  {error_kind = 'timeout', reason = reason}, {reason = reason, worker = t.worker}, retries)
redis.call('HINCRBY', K.stats, 'fail:timeout', 1)
if retries then
  -- A lost heartbeat (or an admin's reclaim) means the worker died or hung, not that the task
  -- failed: retry at once.
  local at = now
  if reason ~= 'heartbeat_lost' and by == '' then at = now + backoff_ms(t.backoff, t.attempt, tonumber(ARGV[5])) end
  -- A task retried at once returns to the head of its line at its next dispatch (lua/dispatch).
  change(K, t, 'expire', 'RETRY_WAITING', now, at,
    {next_retry_at = at, returning = at <= now and '1' or ''}, {reason = reason})
  if at <= now then promote_now(K, t, now) end
end
return finish({C.OK, t.status, reason})
