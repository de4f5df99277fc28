-- Checkpoint: the lease holder saves a value that later attempts of the task can read.
-- From: PROCESSING
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id;
--   ARGV[7]: checkpoint name; ARGV[8]: value JSON; ARGV[9]: worker name
-- Returns: {OK} | {NOT_FOUND} | {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local refused = check_lease(K, t, 'checkpoint', ARGV[5], ARGV[6], ARGV[9], now, false)
if refused then return refused end

redis.call('HSET', K.checkpoints, ARGV[7], ARGV[8])
return {C.OK}
