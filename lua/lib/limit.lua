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

-- A parked task keeps its place in line this long after its park ended (ms), while it is
-- promoted, dispatched and claimed; one that comes later loses it (goes to the back), and one that
-- never comes (cancelled while parked) holds a slot no longer than this.
local HOLD_MS = 5000

-- Before a claim, and at a park: nil when task `id` may start now, else the time (ms) its start
-- slot opens. A sliding log, exact: a start is allowed only while fewer than `limit` starts are in
-- (now - period, now]. Tasks parked by the limit wait in line (P, by when their slot opens), and
-- a claim does not take a free slot that a task ahead of it in line holds: a new task goes behind
-- every parked one, so a parked task is not starved by new ones, and n parked tasks come back one
-- slot each rather than all at the first. Slots open as starts leave the window; after `limit`
-- of them, as the starts made in those slots leave it, a period later.
local function limit_gate(L, P, id, now, cfg)
  redis.call('ZREMRANGEBYSCORE', L, '-inf', now - cfg.period_ms)  -- starts out of the window
  local used = redis.call('ZCARD', L)
  local since = '(' .. (now - HOLD_MS)  -- the line: parks ended since
  local mine = tonumber(redis.call('ZSCORE', P, id))
  if mine and mine <= now - HOLD_MS then mine = nil end
  local ahead = redis.call('ZCOUNT', P, since, mine and '(' .. mine or '+inf')
  local free = cfg.limit - used
  if ahead < free then return nil end
  local m = ahead % cfg.limit  -- its slot is the `ahead`-th to open (0-based)
  local base = now - cfg.period_ms  -- a slot free now opens again a period after it is taken
  if m >= free then
    local i = used - cfg.limit + m  -- the start whose leaving opens it (0-based, in start order)
    base = tonumber(redis.call('ZRANGE', L, i, i, 'WITHSCORES')[2])
  end
  return base + cfg.period_ms * (1 + math.floor(ahead / cfg.limit))
end

-- A claim took a start: counted in the log (which lapses a period after its newest start);
-- the task is no longer parked.
local function limit_take(L, P, t, token, now, cfg)
  redis.call('ZADD', L, now, t.id .. ':' .. token)
  redis.call('PEXPIRE', L, cfg.period_ms)
  redis.call('ZREM', P, t.id)
end

-- A task parked by the limit until `at`, in line. Entries out of the line are dropped (tasks that
-- came too late, or were cancelled or edited while parked); the set lapses once its last park
-- is out of the line.
local function limit_park(P, id, at, now, cfg)
  redis.call('ZREMRANGEBYSCORE', P, '-inf', now - HOLD_MS)
  redis.call('ZADD', P, at, id)
  local ttl = at - now + HOLD_MS
  if redis.call('PTTL', P) < ttl then redis.call('PEXPIRE', P, ttl) end
end
