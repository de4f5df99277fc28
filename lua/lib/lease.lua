--- Fencing: checks a lease holder's token and claim id. Refusals are counted and recorded.
-- A lease is the pair (token, claim id): the token orders attempts, the claim id (random, one per
-- claim) tells apart two claims that issued the same token on different timelines (a failover that
-- lost a claim lets the next claim count to the same token again).

-- Records a refused lease-holder call: counted, in history and stream; nothing else changes.
local function refuse_stale(K, t, verb, token, worker, now)
  redis.call('HINCRBY', K.stats, 'stale_rejections', 1)
  emit(K, t, 'stale', now, {verb = verb, token = token, worker = worker,
    reason = 'stale token ' .. token .. ' (current ' .. t.token .. ', ' .. t.status .. ')'}, true)
end

-- True when (token, claim) is the lease the task's latest claim issued.
local function is_lease(t, token, claim)
  return tostring(t.token) == token and t.claim_id == claim
end

-- Returns nil when (`token`, `claim`) holds the lease of a PROCESSING task, else the reply to send.
-- `ending` verbs (complete, fail, release) answer REPLAYED to a repeat of the same call.
local function check_lease(K, t, verb, token, claim, worker, now, ending)
  if ending and t.ended_token == token and t.ended_by == verb and t.claim_id == claim then
    return {replay(K), t.status, t.version}
  end
  if t.status == 'PROCESSING' and is_lease(t, token, claim) then return nil end
  refuse_stale(K, t, verb, token, worker, now)
  if t.status == 'CANCELLED' and is_lease(t, token, claim) then return {C.CANCELLED, t.status} end
  return {C.LEASE_LOST, t.status}
end
