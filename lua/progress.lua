-- Progress: the lease holder reports how far the current stage has come, with a message.
-- From: PROCESSING
-- To: PROCESSING
-- KEYS[1..T]: the task's keys (T = the fields of engine/keys.py TaskKeys)
-- ARGV[1..4]: engine config; ARGV[5]: fencing token; ARGV[6]: fraction 0..1;
--   ARGV[7]: message; ARGV[8]: worker name
-- Returns: {OK, version} | {REPLAYED, version} when nothing changed | {NOT_FOUND} |
--   {LEASE_LOST, state} | {CANCELLED, state}
local t = load_task(K.task)
if not t then return {C.NOT_FOUND} end
local now = now_ms()
local refused = check_lease(K, t, 'progress', ARGV[5], ARGV[8], now, false)
if refused then return refused end
if t.progress == ARGV[6] and (t.message or '') == ARGV[7] then return {C.REPLAYED, t.version} end

-- The stream carries progress; the history keeps transitions and stages only.
touch(K, t, now, {progress = ARGV[6], message = ARGV[7]}, 'progress',
  {progress = ARGV[6], message = ARGV[7], stage = t.stage, attempt = t.attempt}, false)
return {C.OK, t.version}
