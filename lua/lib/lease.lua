--- Fencing: checks a lease holder's token. Refusals are counted and recorded.

-- Records a refused lease-holder call: counted, in history and stream; nothing else changes.
local function refuse_stale(K, t, verb, token, worker, now)
  redis.call('HINCRBY', K.stats, 'stale_rejections', 1)
  emit(K, t, 'stale', now, {verb = verb, token = token, worker = worker,
    reason = 'stale token ' .. token .. ' (current ' .. t.token .. ', ' .. t.status .. ')'}, true)
end

-- Returns nil when `token` holds the lease of a PROCESSING task, else the reply to send.
-- `ending` verbs (complete, fail, release) answer REPLAYED to a repeat of the same call.
local function check_lease(K, t, verb, token, worker, now, ending)
  if ending and t.ended_token == token and t.ended_by == verb then
    return {C.REPLAYED, t.status, t.version}
  end
  if t.status == 'PROCESSING' and tostring(t.token) == token then return nil end
  refuse_stale(K, t, verb, token, worker, now)
  if t.status == 'CANCELLED' and tostring(t.token) == token then return {C.CANCELLED, t.status} end
  return {C.LEASE_LOST, t.status}
end
