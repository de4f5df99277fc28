--- Recording: events on the queue stream and the task's own history, and
--- state changes with their counters, time in state and deadline sets.

-- Set when a task that others wait on ended: the reply then ends with '!resolve', and the
-- engine resolves the waiting tasks at once (lib: finish).
local RESOLVE_DUE = false
local RECHECK_MS = 60000  -- a waiting task looks at its parents at least this often (safety net)
-- Fields of a PROCESSING task's attempt only: a task that leaves PROCESSING keeps none of them.
local ATTEMPT_FIELDS = {'lease_until', 'attempt_deadline', 'stage_deadline', 'stage_since'}
-- Fields of a QUEUED task only (lua/dispatch.lua): a task that leaves QUEUED keeps none of them (its
-- history's dispatch entry keeps when it was dispatched).
local QUEUED_FIELDS = {'dispatch_id', 'dispatched_at', 'queued_at'}
-- The settings only a later attempt reads (claim, fail, expire, edit): a task that ends where no
-- attempt can follow (SUCCESS, CANCELLED; retry reopens FAILED and TIMEOUT only) keeps none of them.
local ATTEMPT_SETTINGS = {'lease_ms', 'timeout_ms', 'backoff'}
local FINAL = {SUCCESS = true, CANCELLED = true}

-- The code of a reply to a call that repeats one already done (REPLAYED), which then writes one
-- thing: the count of repeats in the queue's stats. A caller's WAIT (Config.wait_replicas) counts
-- the writes made on its own connection, and Redis 7.2 and later (Valkey too) move that count only
-- by a call that writes (Redis 7.0 moved it by every command): a repeat that wrote nothing was
-- acknowledged at once, while the replicas could still lack the first call's write it repeats.
-- This write comes after that one, so the WAIT covers both. On a Redis at maxmemory the count is
-- refused (OOM) and the repeat still answers: a resent call must find what it did.
local function replay(K)
  redis.pcall('HINCRBY', K.stats, 'replayed', 1)
  return C.REPLAYED
end

-- The reply of a script that may end a task.
local function finish(reply)
  if RESOLVE_DUE then reply[#reply + 1] = '!resolve' end
  return reply
end

-- A value of a history entry, its '|' and '\' escaped by a '\' (a number's text has neither).
local function history_value(v)
  if type(v) ~= 'string' then return DIGIT[v] or tostring(v) end
  if string.find(v, '[|\\]') then v = string.gsub(v, '[|\\]', '\\%0') end
  return v
end

-- The fields of the history entry of an event (engine/core/models.py HISTORY_LAYOUT, read by
-- history_entry), and how many: the fields of HL by position ('' for a transition's kind, and for its
-- from or to where its verb implies it: IMPLIED), then the others as '<short name (HN)>=<value>'.
local function history_parts(kind, now, ev)
  local transition = kind == 'transition'
  -- Sized for HL and a few others at once (a table grown one key at a time is rebuilt at 4, 8, 16).
  local parts = {numtext(now), transition and '' or kind, '', '', '', '', '', '', '', '', '', '', '', ''}
  for i = 3, #HL do
    local name = HL[i]
    local v = ev[name]
    if v == nil or v == '' or (transition and IMPLIED[name] and IMPLIED[name][ev.verb] == v) then
      parts[i] = ''
    else
      parts[i] = history_value(v)
    end
  end
  local n = #HL
  for k, v in pairs(ev) do
    if v ~= '' and not IN_HL[k] then
      n = n + 1
      parts[n] = (HN[k] or k) .. '=' .. history_value(v)
    end
  end
  return parts, n
end

-- The entry: the parts joined by '|', trailing empty fields left out when no other field follows.
local function history_line(parts, n)
  while n > 2 and parts[n] == '' do n = n - 1 end
  return table.concat(parts, '|', 1, n)
end

-- The queue stream's entry of task `t`'s event `line` under `id`, by `call` (redis.call or redis.pcall).
local function stream_add(call, K, t, id, line)
  return call('XADD', K.events, 'MAXLEN', '~', CFG.stream_max, id, 'id', t.id, 'owner', t.owner, 'type', t.type,
    'version', numtext(t.version), 'e', line)
end

-- Whether this call's time is before the queue stream's last entry (a clock that went back after a
-- failover; always on Redis 6.2, which takes no '<ms>-*'): every time a queue records, a task's
-- creation time included, is at most the stream's last id, so until then none is after now.
local CLOCK_BEHIND = false

-- Appends an event to the queue stream (always) and to the task history (when `hist`): the same
-- line in both, except that the history leaves to its other entries what they say already
-- (engine/core/models.py history_entries reads it back): an entry's time is '+<ms since the task's
-- creation>' (its submit entry's time), and an entry by the worker its attempt's claim entry names
-- leaves that worker out (models.py OF_CLAIM: a stage, complete, fail, release or expire). A stream
-- entry stands alone: it keeps the worker, and its time is its id's. `ev` holds the event's own
-- fields. A stream entry has five fields, the same five for every event (engine/core/streams.py
-- stream_event): Redis then stores an entry as its values alone, and the readers' filters (task,
-- owner) need no parsing.
local function emit(K, t, kind, now, ev, hist)
  local parts, n = history_parts(kind, now, ev)
  local at = parts[1]
  -- The stream entry's id is '<now>-<seq>' (XADD's '<ms>-*'), so its line leaves the time out
  -- (engine/core/streams.py stream_event reads it off the id). Where the stream's last id is later
  -- than now (a clock that went back after a failover) or the server takes no '<ms>-*' (Redis 6.2),
  -- Redis picks the id and the line keeps the time.
  parts[1] = ''
  local stamped = stream_add(redis.pcall, K, t, at .. '-*', history_line(parts, n))
  parts[1] = at
  if type(stamped) == 'table' then
    CLOCK_BEHIND = true
    stream_add(redis.call, K, t, '*', history_line(parts, n))
  end
  if hist then
    local what = kind == 'transition' and ev.verb or kind
    local created = tonumber(t.created_at)
    if created and what ~= 'submit' then parts[1] = '+' .. numtext(now - created) end
    if OF_CLAIM[what] and parts[HL_WORKER] ~= '' and ev.worker == t.worker then parts[HL_WORKER] = '' end
    body_record(K, history_line(parts, n), CFG.history_max)
  end
end

-- Queues a webhook notification (engine/notify.py) when the task asked for one.
local function notify(K, t, event, now, reason)
  if t.notify_url and t.notify_url ~= '' then
    redis.call('RPUSH', K.outbox, cjson.encode({task = t.id, owner = t.owner, type = t.type, url = t.notify_url,
      event = event, status = t.status, reason = reason or t.reason or '', version = t.version, at = now}))
  end
end

-- Moves the task between deadline sets: out of the set of state `from`, into
-- the set of state `to` at `score` (terminal states: onto the ended line).
local function place(K, t, from, to, score, now, passing)
  local id = t.id
  local old = from and DEADLINE_SET[from]
  local new = DEADLINE_SET[to]
  -- A PENDING task waiting on parents sits in the waiting set instead of the dispatch set.
  if from == 'PENDING' then redis.call('ZREM', K.waiting, id) end
  if to == 'PENDING' and t.waiting_on == '1' then new = 'waiting' end
  -- The line workers take QUEUED tasks in: priority first (higher first), then dispatch order,
  -- except that a task returning from a lost attempt (t.front) goes to the head of its priority.
  if from == 'QUEUED' and not t.keep_place then redis.call('ZREM', K.ready, id) end
  if to == 'QUEUED' and not t.keep_place then
    local seq = PRIORITY_SPAN / 2 + redis.call('HINCRBY', K.counts, 'dispatch_seq', '1')
    if t.front then seq = PRIORITY_SPAN / 2 - redis.call('HINCRBY', K.counts, 'front_seq', '1') end
    redis.call('ZADD', K.ready, -tonumber(t.priority or 0) * PRIORITY_SPAN + seq, id)
  end
  if old and old ~= new then redis.call('ZREM', K[old], id) end
  -- Started or ended: its expiry (submit's expires_in) no longer applies.
  if t.expires_at and t.expires_at ~= '' and (to == 'PROCESSING' or TERMINAL[to]) then
    redis.call('ZREM', K.start_by, id)
  end
  -- A task that ended before the ended line is in the expiry set: it leaves it when it is retried.
  -- An entry of the ended line stays: the purge finds it stale (lua/purge.lua) and drops it.
  if from and TERMINAL[from] and not t.passing then redis.call('ZREM', K.expiry, id) end
  if new then
    redis.call('ZADD', K[new], numtext(score), id)
    -- Due sooner than a sleeping sweeper may next look (engine/config.py WAKE_WITHIN): wake it, on
    -- the channel named after the set (engine/sweep.py listens). Not for "due now": the caller acts.
    if score > now and score - now < WAKE_WITHIN_MS then redis.call('PUBLISH', K[new], score) end
  elseif TERMINAL[to] and not passing then  -- (one passing through is left again in the same script)
    -- Ended: on the ended line, as '<id> <ended ms>' (its state_since); the sweeper purges it once
    -- its retention (the sweeper's) has passed since then.
    redis.call('RPUSH', K.ended, ended_entry(id, now))
    -- Ended in time or not: nothing more to escalate (only a task with a due or escalation time is
    -- ever watched: create, lua/overdue.lua, lua/retry.lua).
    if t.due_at or t.escalate_at then redis.call('ZREM', K.watch, id) end
    -- Tasks still waiting on this one are due for a look at their parents now.
    for _, kid in ipairs(redis.call('SMEMBERS', K.children)) do
      if redis.call('ZSCORE', K.waiting, kid) then
        redis.call('ZADD', K.waiting, numtext(now), kid)
        RESOLVE_DUE = true
      end
    end
  end
end

-- Adds the time spent in the current stage to the stage statistics.
local function close_stage(K, t, now)
  if t.stage and t.stage ~= '' then
    redis.call('HINCRBY', K.stats, 'stage_ms:' .. t.stage, now - t.stage_since)
    redis.call('HINCRBY', K.stats, 'stage_n:' .. t.stage, '1')
  end
end

-- Counts the task in (delta 1) or out (delta -1) of its owner's unfinished tasks and their args
-- bytes in the queue's owners hash, which submit quotas read (lib/quota). A field that reaches 0
-- goes, so the hash holds only owners with unfinished tasks; one that would go below 0 (a task
-- submitted before the counts existed ended) goes too, so the counts are right again once the
-- owner has no unfinished task left.
local function count_unfinished(K, t, delta)
  local bytes = t.args_bytes or #(body_args(K) or '')
  if redis.call('HINCRBY', K.owners, 'n:' .. t.owner, delta) <= 0 then redis.call('HDEL', K.owners, 'n:' .. t.owner) end
  if redis.call('HINCRBY', K.owners, 'b:' .. t.owner, delta * bytes) <= 0 then
    redis.call('HDEL', K.owners, 'b:' .. t.owner)
  end
end

-- Counts a duration in one of the queue's histograms (`name`: 'wait' or 'run'): one counter per
-- bucket, '<name>_h:<upper bound ms>' ('inf' above the last), in the queue's stats hash
-- (web/metrics.py makes them cumulative). Per queue, never per task. Its total: '<name>_ms' when
-- `total`; the run histogram's is the time-in-state total of PROCESSING ('tis_ms:PROCESSING',
-- which `change` adds anyway: engine/core/stats.py HISTOGRAM_TOTALS).
local function observe(K, name, ms, total)
  if ms < 0 then ms = 0 end
  local bound = 'inf'
  for _, b in ipairs(BUCKETS_MS) do
    if ms <= b then bound = b break end
  end
  redis.call('HINCRBY', K.stats, name .. '_h:' .. bound, '1')
  if total then redis.call('HINCRBY', K.stats, name .. '_ms', ms) end
end

-- The two lines of tasks waiting for a worker, PENDING and QUEUED, each scored by when the task
-- began to wait: when it entered PENDING (submit, release, promote, retry) or, later, when its
-- submit's delay ended or its parents were met (a task waiting on parents is in neither). A
-- dispatch keeps the score; a claim counts now - score in the 'wait' histogram. The head of a line
-- is its oldest waiting task (web/metrics.py reads it: ZRANGE 0 0).
local function wait_lines(K, t, from, to, now, fields)
  local since
  if from == 'PENDING' or from == 'QUEUED' then
    local line = from == 'PENDING' and K.pending_since or K.queued_since
    since = tonumber(redis.call('ZSCORE', line, t.id))
    if since then redis.call('ZREM', line, t.id) end
    -- A task that began to wait before the lines existed: the best guess there is.
    since = since or (from == 'QUEUED' and tonumber(t.queued_at or '')) or t.state_since
  end
  if to == 'PENDING' then
    if (fields.waiting_on or t.waiting_on) ~= '1' then
      redis.call('ZADD', K.pending_since, numtext(math.max(now, tonumber(fields.not_before or t.not_before or 0))), t.id)
    end
  elseif to == 'QUEUED' then
    redis.call('ZADD', K.queued_since, numtext(since or now), t.id)
  elseif to == 'PROCESSING' and since then
    observe(K, 'wait', now - math.max(since, tonumber(t.not_before or 0)), true)
  end
end

-- The one way a task changes state. Checks nothing: callers validate first. `passing`: the
-- task goes on to another state in the same script (expire's PROCESSING -> TIMEOUT ->
-- RETRY_WAITING), so a terminal state's effects (due-time watch, waiting children,
-- webhooks, leaving its owner's unfinished count) do not happen.
-- `score`: deadline in the target state's set (ignored for terminal states).
local function change(K, t, verb, to, now, score, fields, ev, passing)
  local from = t.status
  if from == 'PROCESSING' then
    close_stage(K, t, now)
    observe(K, 'run', now - t.state_since, false)
  end
  -- One counter per move, '<from>><to>' ('>PENDING' for a submit), in the queue's counts hash:
  -- the tasks in a state, that entered it and that left it are sums of these (engine/core/stats.py
  -- state_counts), so a move costs one HINCRBY where a counter per figure cost three. After a write
  -- Redis refuses when full: a script's first write must be one (a ZREM is allowed, and would let
  -- the rest of the script write past maxmemory).
  redis.call('HINCRBY', K.counts, (from or '') .. '>' .. to, '1')
  if from then redis.call('HINCRBY', K.stats, 'tis_ms:' .. from, now - t.state_since) end
  wait_lines(K, t, from, to, now, fields)
  place(K, t, from, to, score, now, passing)
  -- Unfinished until a terminal state that is not passed through; again so after a manual retry.
  local was_open = from ~= nil and (not TERMINAL[from] or t.passing == true)
  local is_open = not TERMINAL[to] or passing == true
  if was_open ~= is_open then count_unfinished(K, t, is_open and 1 or -1) end
  t.passing = passing
  local function drop(names)
    for _, k in ipairs(names) do
      if fields[k] == nil then fields[k] = '' end
    end
  end
  if from == 'PROCESSING' and to ~= 'PROCESSING' then drop(ATTEMPT_FIELDS) end  -- the attempt's deadlines end with it
  if from == 'QUEUED' and to ~= 'QUEUED' then drop(QUEUED_FIELDS) end  -- and a dispatch's with its job's claim
  if FINAL[to] then drop(ATTEMPT_SETTINGS) end
  -- Passed over by a claim (lua/claim.lua): so until it leaves QUEUED or is dispatched again.
  if from == 'QUEUED' and t.passed and fields.passed == nil then fields.passed = '' end
  fields.status = to
  fields.state_since = now
  -- Implied, so not stored (engine/core/models.py Task.from_redis): updated_at is state_since until
  -- a touch (stage, progress) stores a later one; finished_at is a terminal task's state_since.
  fields.updated_at = ''
  fields.finished_at = ''
  fields.version = (t.version or 0) + 1
  save_task(K.task, t, fields)
  ev.verb = verb
  ev.from = from or ''
  ev.to = to
  ev.attempt = ev.attempt or t.attempt
  ev.stage = ev.stage or t.stage
  emit(K, t, 'transition', now, ev, true)
  if TERMINAL[to] and not passing then notify(K, t, 'terminal', now) end
end

-- Whether a task's expiry (submit's expires_in) has passed; claim clears it, so only a task never
-- started has one.
local function lapsed(t, now)
  local at = tonumber(t.expires_at) or 0
  return at > 0 and at <= now
end

-- PENDING, QUEUED or RETRY_WAITING -> CANCELLED, reason expired: the lapse verb (lua/lapse.lua, the
-- sweeper at the expiry time; claim records it instead of starting a task it finds expired).
local function lapse_now(K, t, now)
  change(K, t, 'lapse', 'CANCELLED', now, 0,
    {reason = 'expired', error_kind = 'expired', next_retry_at = '', waiting_on = ''},
    {reason = 'expired'})
end

-- RETRY_WAITING -> PENDING, due for dispatch now: the promote verb (lua/promote.lua; expire
-- chains into it when the retry is due at once, saving the sweeper a second call).
local function promote_now(K, t, now)
  change(K, t, 'promote', 'PENDING', now, now, {next_retry_at = ''}, {})
end

-- A change inside PROCESSING (stage, progress): new version, an event, no state change.
local function touch(K, t, now, fields, kind, ev, hist)
  fields.updated_at = now
  fields.version = t.version + 1
  save_task(K.task, t, fields)
  emit(K, t, kind, now, ev, hist)
end

-- When an unfinished task is next looked at for its due times: its due time, else its escalation
-- time, each only until it has been recorded (nil: never).
local function watch_time(t)
  if tonumber(t.due_at or 0) > 0 and not t.overdue_at then return t.due_at end
  if tonumber(t.escalate_at or 0) > 0 and not t.escalated_at then return t.escalate_at end
  return nil
end

-- Creates a task hash in PENDING, listed in its queue's index and its owner's (O: lib/index's I).
-- `f` holds the type's settings; the caller has already checked that the id is free. A task with
-- `f.waiting_on == '1'` goes to the waiting set at `due`, others to the dispatch set.
local function create(K, O, f, args_json, now, delay_ms, ev, due)
  local t = {}
  f.attempt = 0
  f.token = 0
  f.progress = 0
  f.created_at = now
  body_new(K, args_json)
  local first = watch_time(f)
  if first then redis.call('ZADD', K.watch, first, f.id) end
  local expires_at = tonumber(f.expires_at) or 0
  if expires_at > 0 then
    redis.call('ZADD', K.start_by, expires_at, f.id)
    if expires_at - now < WAKE_WITHIN_MS then redis.call('PUBLISH', K.start_by, expires_at) end
  else
    f.expires_at = nil
  end
  t.id, t.owner, t.type, t.waiting_on, t.args_bytes = f.id, f.owner, f.type, f.waiting_on, #args_json
  t.queue, f.id, f.queue = f.queue, nil, nil  -- implied by the key: not stored (lib/task load_task)
  if not due then
    due = now + delay_ms
    if delay_ms == 0 then due = now + CFG.dispatch_grace_ms end
  end
  change(K, t, 'submit', 'PENDING', now, due, f, ev)
  -- Listed at its creation time: now, unless the clock is behind the queue's (its submit event
  -- could not be stamped now), then not before either index's newest (lib/index index_time), a
  -- time it keeps as listed_at (purge finds its pages by it; its history counts from created_at).
  local Q, at = {head = K.index, pages = K.index_pages, page = K.index_page}, now
  if CLOCK_BEHIND then
    at = index_time(O, index_time(Q, now))
    if at ~= now then redis.call('HSET', K.task, 'listed_at', at) end
  end
  index_add(Q, numtext(at), t.id, t.id)
  index_add(O, numtext(at), t.id, t.id)
  return t
end
