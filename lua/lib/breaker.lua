--- Circuit breaker of an upstream, counted by complete and fail. B is its hash key (or nil
--- when the task type has none); `cfg` = {window_ms, threshold, min_calls, cooldown_ms}.
--- Fields: state (closed | open | half_open), open_until, probe (the task allowed through
--- while half-open), probe_until, and outcome buckets 'ok:<n>' / 'fail:<n>' of window/6 ms each.

local BUCKETS = 6
-- While a half-open breaker's probe runs, the other tasks are parked this long at most (ms; less
-- when the cool-down is shorter), then look again: the probe's outcome is seen within 5 s.
local PROBE_WAIT_MS = 5000

-- Before a claim: nil when the attempt may start, else the time (ms) to park the task until.
local function breaker_gate(B, t, now, cooldown_ms)
  if not B then return nil end
  local b = redis.call('HMGET', B, 'state', 'open_until', 'probe', 'probe_until')
  local state, open_until = b[1] or 'closed', tonumber(b[2] or 0)
  if state == 'closed' then return nil end
  if state == 'open' and now < open_until then return open_until end
  -- Cool-down over: one probe goes through; the others wait for its outcome (bounded).
  if state == 'open' or b[3] == t.id or now >= tonumber(b[4] or 0) then
    redis.call('HSET', B, 'state', 'half_open', 'probe', t.id, 'probe_until', now + cooldown_ms)
    return nil
  end
  return now + math.min(cooldown_ms, PROBE_WAIT_MS)
end

-- After an outcome: counts it and opens or closes the breaker. Returns the new state when it changed.
local function breaker_record(B, t, ok, now, cfg)
  if not B then return nil end
  local width = math.max(1, math.floor(cfg.window_ms / BUCKETS))
  local bucket = math.floor(now / width)
  local flat = redis.call('HGETALL', B)
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  local state = f.state or 'closed'
  local calls, fails = 0, 0
  for k, v in pairs(f) do
    local kind, n = string.match(k, '^(%a+):(%d+)$')
    if kind then
      if tonumber(n) <= bucket - BUCKETS then
        redis.call('HDEL', B, k)
      else
        calls = calls + tonumber(v)
        if kind == 'fail' then fails = fails + tonumber(v) end
      end
    end
  end
  redis.call('HINCRBY', B, (ok and 'ok:' or 'fail:') .. bucket, 1)
  calls = calls + 1
  if not ok then fails = fails + 1 end
  local new
  if state == 'half_open' and f.probe == t.id then
    new = ok and 'closed' or 'open'
  elseif state == 'closed' and not ok and calls >= cfg.min_calls and fails / calls >= cfg.threshold then
    new = 'open'
  end
  if new == 'closed' then
    redis.call('DEL', B)
    redis.call('HSET', B, 'state', 'closed', 'changed_at', now)
  elseif new == 'open' then
    redis.call('HSET', B, 'state', 'open', 'open_until', now + cfg.cooldown_ms, 'changed_at', now,
      'probe', '', 'probe_until', 0)
  end
  return new
end

-- ARGV form of a breaker's settings: '<window ms> <threshold> <min calls> <cooldown ms> <name>' or ''.
local function breaker_cfg(s)
  if s == nil or s == '' then return nil end
  local p = {}
  for w in string.gmatch(s, '%S+') do p[#p + 1] = w end
  return {window_ms = tonumber(p[1]), threshold = tonumber(p[2]), min_calls = tonumber(p[3]),
    cooldown_ms = tonumber(p[4]), name = p[5]}
end

-- breaker_record, plus an event on the queue stream when the breaker changed state.
local function breaker_outcome(K, B, t, ok, now, cfg)
  if not cfg then return end
  local new = breaker_record(B, t, ok, now, cfg)
  if new then emit(K, t, 'breaker', now, {upstream = cfg.name, state = new}, false) end
end
