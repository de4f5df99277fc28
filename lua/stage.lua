-- Stage: the lease holder enters a named stage, which may carry its own deadline.
-- From: PROCESSING
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id;
--   ARGV[7]: stage name; ARGV[8]: stage timeout ms (0 = none); ARGV[9]: worker name
-- Returns: {OK, version} | {REPLAYED, version} when already in that stage | {NOT_FOUND} |
--   {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local refused = check_lease(K, t, 'stage', ARGV[5], ARGV[6], ARGV[9], now, false)
if refused then return refused end
local name = ARGV[7]
if t.stage == name then return {replay(K), t.version} end

close_stage(K, t, now)
local timeout = tonumber(ARGV[8])
local deadline = 0
if timeout > 0 then deadline = now + timeout end
touch(K, t, now, {stage = name, stage_since = now, stage_deadline = deadline}, 'stage',
  {stage = name, from_stage = t.stage, attempt = t.attempt, worker = t.worker}, true)
redis.call('ZADD', K.leases, lease_deadline(t), t.id)
return {C.OK, t.version}
