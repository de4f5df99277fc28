-- Progress: the lease holder reports how far the current stage has come, with a message.
-- From: PROCESSING
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T: those of engine/core/keys.py TaskKeys it touches, lua_source.py task_keys_of)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: claim id;
--   ARGV[7]: fraction 0..1; ARGV[8]: message; ARGV[9]: worker name
-- Returns: {OK, version} | {REPLAYED, version} when nothing changed | {NOT_FOUND} |
--   {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local refused = check_lease(K, t, 'progress', ARGV[5], ARGV[6], ARGV[9], now, false)
if refused then return refused end
local fraction, message = ARGV[7], ARGV[8]
if t.progress == fraction and (t.message or '') == message then return {replay(K), t.version} end

-- The stream carries progress; the history keeps transitions and stages only.
touch(K, t, now, {progress = fraction, message = message}, 'progress',
  {progress = fraction, message = message, stage = t.stage, attempt = t.attempt}, false)
return {C.OK, t.version}
