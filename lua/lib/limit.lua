--- Rate limit of an upstream (engine/core/rates.py): at most `limit` attempt starts in any
--- `period_ms`, decided by claim on Redis time. L, the upstream's log: a zset of the starts in the
--- last period (member '<task id>:<token>', scored by the start, ms). P, its parked tasks: a zset
--- of task id -> when its park ends (ms), kept by park and claim so each parked task gets its own slot.

-- ARGV form of a limit: '<limit> <period ms> <name>' or '' (none).
local function limit_cfg(s)
  if s == nil or s == '' then return nil end
  local n, period, name = string.match(s, '^(%d+) (%d+) (%S+)$')
  return {limit = tonumber(n), period_ms = tonumber(period), name = name}
end

-- Before a claim: nil when an attempt may start now, else the time (ms) to park the task until.
-- A sliding log, exact: a start is allowed while fewer than `limit` starts are in (now - period,
-- now]. A refused task parks until as many slots have freed as tasks are parked ahead of it (a
-- slot frees when a start leaves the window; after `limit` of them, the parked ones' own starts
-- leave it a period later), so n parked tasks come back one slot each rather than all at the
-- first. The claim then decides again: the schedule spreads, the log enforces.
local function limit_gate(L, P, now, cfg)
  redis.call('ZREMRANGEBYSCORE', L, '-inf', now - cfg.period_ms)  -- starts out of the window
  local used = redis.call('ZCARD', L)
  if used < cfg.limit then return nil end
  local ahead = redis.call('ZCOUNT', P, '(' .. now, '+inf')
  local i = used - cfg.limit + ahead % cfg.limit  -- 0-based, in start order
  local start = tonumber(redis.call('ZRANGE', L, i, i, 'WITHSCORES')[2])
  return start + cfg.period_ms * (1 + math.floor(ahead / cfg.limit))
end

-- A claim took a start: counted in the log (which lapses a period after its newest start);
-- the task is no longer parked.
local function limit_take(L, P, t, token, now, cfg)
  redis.call('ZADD', L, now, t.id .. ':' .. token)
  redis.call('PEXPIRE', L, cfg.period_ms)
  redis.call('ZREM', P, t.id)
end

-- A task parked by the limit until `at`. Entries a period past their end are dropped (tasks
-- cancelled or edited while parked); the set lapses a period after its last park ends.
local function limit_park(P, id, at, now, cfg)
  redis.call('ZREMRANGEBYSCORE', P, '-inf', now - cfg.period_ms)
  redis.call('ZADD', P, at, id)
  local ttl = at - now + cfg.period_ms
  if redis.call('PTTL', P) < ttl then redis.call('PEXPIRE', P, ttl) end
end
