--- Reading and writing the task hash. Numbers stay strings in Redis; the
--- fields a script does arithmetic on are converted once here.

local NUMERIC = {version = true, attempt = true, max_attempts = true, token = true,
  state_since = true, lease_until = true, stage_deadline = true, attempt_deadline = true,
  stage_since = true, lease_ms = true, timeout_ms = true}

local function load_task(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  -- Sized once for the usual fields: a table grown one key at a time is rebuilt at 1, 2, 4, 8, 16.
  local t = {id = nil, queue = nil, status = nil, state_since = nil, type = nil, version = nil, owner = nil,
    created_at = nil, attempt = nil, token = nil, max_attempts = nil, lease_ms = nil, timeout_ms = nil,
    backoff = nil, dispatch_id = nil, dispatched_at = nil, queued_at = nil, claim_id = nil, worker = nil,
    started_at = nil, lease_until = nil, attempt_deadline = nil, stage_since = nil, stage = nil,
    stage_deadline = nil, progress = nil, message = nil, priority = nil, updated_at = nil}
  for i = 1, #flat, 2 do
    local k, v = flat[i], flat[i + 1]
    if NUMERIC[k] then v = tonumber(v) end
    t[k] = v
  end
  -- Implied by the key (create stores neither; a task from before did): '...:task:<queue>.<hex>'.
  t.id = t.id or string.match(key, ':task:([^:]+)$')
  t.queue = t.queue or string.match(t.id, '^([^.]+)%.')
  if t.status == 'SUCCESS' then  -- implied by the state (lua/complete.lua stores none of them)
    t.progress = t.progress or '1'
    t.ended_by = t.ended_by or 'complete'
    t.ended_token = t.ended_token or tostring(t.token)
  end
  return t
end

-- The task, or nil after taking the id of a task that is gone out of the sweeper's `set`.
local function load_listed(key, set, id)
  local t = load_task(key)
  if not t then redis.call('ZREM', set, id) end
  return t
end

-- HSET's and HDEL's arguments, filled from 1 by each save_task and read up to its count: a table
-- grown one key at a time is rebuilt at 1, 2, 4, 8, 16 and 32 (a function library keeps them from
-- one call to the next, so they are grown once).
local SAVE_ARGS, SAVE_GONE = {}, {}

-- Writes `fields` to the hash (one HSET) and mirrors them into `t`. An empty value is no field:
-- it is deleted (one HDEL), so a task keeps only what it has (readers default what is absent).
local function save_task(key, t, fields)
  local args, gone, n, m = SAVE_ARGS, SAVE_GONE, 0, 0
  for k, v in pairs(fields) do
    if v == '' then
      if t[k] ~= nil then
        m = m + 1
        gone[m] = k
      end
      t[k] = nil
    else
      args[n + 1] = k
      args[n + 2] = numtext(v)
      n = n + 2
      t[k] = v
    end
  end
  if n > 0 then redis.call('HSET', key, unpack(args, 1, n)) end
  if m > 0 then redis.call('HDEL', key, unpack(gone, 1, m)) end
end

-- Owner check done inside the script: a foreign task looks exactly like a missing one.
local function visible(t, by, admin)
  return t ~= nil and (admin == '1' or t.owner == by)
end

-- The PROCESSING deadline: the earliest of heartbeat lease, stage deadline and attempt deadline.
local function lease_deadline(t)
  local d = math.min(t.lease_until, t.attempt_deadline)
  if t.stage_deadline and t.stage_deadline > 0 then d = math.min(d, t.stage_deadline) end
  return d
end

--- The task's body: one list of its args JSON (index 0), its result JSON (index 1, '' until
--- SUCCESS) and its history entries (from index 2, oldest first), so that a task is two keys, its
--- hash and its body, not four. A task from before the body keeps its args, result and history
--- under K.args, K.result and K.history (engine/core/keys.py TaskKeys): each helper falls back on them.
--- BODY_HISTORY (the preamble's, from keys.py) is the index of the first history entry.
local TRIMMED = '\0trimmed'  -- no JSON text: marks the entry LREM takes out (a list has no "remove at")

local function body_new(K, args_json)
  redis.call('RPUSH', K.body, args_json, '')
end

-- The args JSON (false when the task has none: it is gone).
local function body_args(K)
  return redis.call('LINDEX', K.body, '0') or redis.call('GET', K.args)
end

-- The result JSON, or false before SUCCESS.
local function body_result(K)
  local result = redis.call('LINDEX', K.body, '1')
  if result == false then return redis.call('GET', K.result) end
  return result ~= '' and result
end

local function body_set_result(K, result_json)
  -- One command for a task with a body: only a task from before it has none ("no such key").
  if redis.pcall('LSET', K.body, '1', result_json).err then redis.call('SET', K.result, result_json) end
end

-- The history entries, oldest first.
local function body_history(K)
  local entries = redis.call('LRANGE', K.body, BODY_HISTORY, -1)
  if #entries > 0 then return entries end  -- a task's first entry is its submit's
  return redis.call('LRANGE', K.history, 0, -1)
end

-- Appends a history entry, keeping the newest `max`.
local function body_record(K, entry, max)
  local n = redis.call('RPUSHX', K.body, entry)
  if n == 0 then
    if redis.call('RPUSH', K.history, entry) > max then redis.call('LTRIM', K.history, -max, -1) end
  elseif n > max + BODY_HISTORY then
    redis.call('LSET', K.body, BODY_HISTORY, TRIMMED)
    redis.call('LREM', K.body, 1, TRIMMED)
  end
end

--- The ended line (K.ended): one entry per ending, '<id> <ended ms>', in the order tasks ended;
--- '<id> <ended ms> <kept until ms>' for a task kept past its retention (lua/purge.lua).

-- The entry of task `id` that ended at `ended` ms (kept until `kept` ms, when given).
local function ended_entry(id, ended, kept)
  return id .. ' ' .. numtext(ended) .. (kept and ' ' .. kept or '')
end

-- id, ended ms, kept-until ms (nil when not kept) of an entry.
local function ended_parse(entry)
  local id, ended, kept = string.match(entry, '^(%S+) (%d+) ?(%d*)$')
  return id, tonumber(ended), tonumber(kept)
end

-- When an entry's task is due for purging: its kept-until, else its end plus this caller's retention.
local function ended_due(entry)
  local _, ended, kept = ended_parse(entry)
  if not ended then return 0 end  -- not an entry: due, so that the purge drops it
  return kept or ended + CFG.retention_ms
end
