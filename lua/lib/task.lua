--- Reading and writing the task hash. Numbers stay strings in Redis; the
--- fields a script does arithmetic on are converted once here.

local NUMERIC = {version = true, attempt = true, max_attempts = true, token = true,
  state_since = true, lease_until = true, stage_deadline = true, attempt_deadline = true,
  stage_since = true, lease_ms = true, timeout_ms = true}

local function load_task(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local t = {}
  for i = 1, #flat, 2 do
    local k, v = flat[i], flat[i + 1]
    if NUMERIC[k] then v = tonumber(v) end
    t[k] = v
  end
  return t
end

-- The task, or nil after taking the id of a task that is gone out of the sweeper's `set`.
local function load_listed(key, set, id)
  local t = load_task(key)
  if not t then redis.call('ZREM', set, id) end
  return t
end

-- Writes `fields` to the hash (one HSET) and mirrors them into `t`.
local function save_task(key, t, fields)
  local args = {}
  for k, v in pairs(fields) do
    args[#args + 1] = k
    args[#args + 1] = v
    t[k] = v
  end
  if #args > 0 then redis.call('HSET', key, unpack(args)) end
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
