-- Dispatch: records that an executor job now exists for the task (or exists again, after a lost one).
-- From: PENDING, QUEUED
-- To: QUEUED
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of); KEYS[T+1]: the queue's
--   control hash (its 'draining' switch)
-- ARGV[1..4]: engine config; ARGV[5]: dispatch id (the executor's job id);
--   ARGV[6]: ms until the sweeper checks that the job still exists;
--   ARGV[7]: the task's score in the dispatch set as the sweeper read it ('' = no check): the
--   dispatch is a compare-and-set on it, so of several sweepers that saw the task due, one dispatches;
--   ARGV[8]: 'rearm' to only move the job check of the current dispatch ARGV[5] (its job is lost:
--   engine.job_lost), never to dispatch; 'passed' to dispatch a task a claim passed over only if
--   its spent dispatch is ARGV[9] (the claim's engine). Any dispatch of a task passed over (its
--   `passed` is set until then: lua/claim.lua) keeps its place in the ready line, even while the
--   queue drains (it had a job), and its job goes to the front of the executor's queue
-- Returns: {OK, version, '1' when the task kept its place (its job goes to the front) or '', its
--   timeout ms (its job must allow at least that)} (a task that returns from an attempt that was
--   taken from it, a reclaimed lease, a lost worker or a release, goes to the head of its priority
--   in the ready line) |
--   {REPLAYED, version} when this dispatch id is already current (its
--   job still exists: the sweeper's next check moves to ARGV[6] from now) |
--   {NOT_DUE} while the queue is draining, or the task waits on its parents or on its submit's
--   delay, or (ARGV[7]) it is no longer due at the score the sweeper saw, or (ARGV[8]) ARGV[5] is
--   not the current dispatch (nothing changes; no job
--   may be made) | {NOT_FOUND} | {ILLEGAL_TRANSITION, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
if t.dispatch_id == ARGV[5] then
  -- Not counted as a repeat (lib/record: replay): the sweeper's check of a job that still exists
  -- answers here each requeue_after, and its ZADD is a write a WAIT after it counts.
  if t.status == 'QUEUED' then redis.call('ZADD', K.dispatch, now + tonumber(ARGV[6]), t.id) end
  return {C.REPLAYED, t.version}
end
if ARGV[8] == 'rearm' then return {C.NOT_DUE} end
-- A task a claim passed over (lua/claim.lua) gets a job again for the dispatch the claim spent,
-- keeping its place in line; even while the queue drains (it had a job). The claim's engine does it
-- at once; the sweeper (or a worker whose horse died) if that failed.
local passed = t.status == 'QUEUED' and t.passed ~= nil
if ARGV[8] == 'passed' and not (passed and t.dispatch_id == ARGV[9]) then return {C.NOT_DUE} end
if not LEGAL.dispatch[t.status] then return {C.ILLEGAL_TRANSITION, t.status} end
local seen = tonumber(ARGV[7] or '')
if seen then
  local score = tonumber(redis.call('ZSCORE', K.dispatch, t.id))
  if score == nil or score ~= seen or score > now then return {C.NOT_DUE} end
end
if not passed and (t.waiting_on == '1' or tonumber(t.not_before or 0) > now
    or redis.call('HEXISTS', KEYS[T + 1], 'draining') == 1) then
  return {C.NOT_DUE}
end

local reason = ''
if t.status == 'QUEUED' then reason = passed and 'passed over' or 'redispatch' end
t.keep_place = passed  -- lib/record: place() leaves it where it is in the ready line
local front = t.returning == '1'
t.front = front  -- lib/record: place() puts it at the head of its priority in the ready line
-- queued_at survives a re-dispatch, so "QUEUED for too long" measures the whole wait.
change(K, t, 'dispatch', 'QUEUED', now, now + tonumber(ARGV[6]),
  {dispatch_id = ARGV[5], dispatched_at = now, queued_at = t.status == 'PENDING' and now or t.queued_at,
   returning = ''},
  {reason = reason})
return {C.OK, t.version, passed and '1' or '', t.timeout_ms}
