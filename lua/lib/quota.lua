--- Submit quotas (engine/quota.py): per owner, per queue, checked by the scripts that create
--- tasks (submit, edit). The counts they read are kept by lib/record (count_unfinished).

-- The owner's quota, checked before any write. `spec` (engine/quota.py Quota.spec) is
-- 'rate period_ms max_unfinished max_unfinished_bytes' (0: no such limit; '': no quota);
-- `opens`: tasks the call adds to the owner's unfinished ones; `bytes`: args bytes it adds.
-- Returns nil and the rate state to store with quota_charge once the call succeeds, or the
-- refusal {QUOTA_EXCEEDED, limit, ms to wait (0: until some of the owner's tasks end), owner}.
local function quota_check(K, rate_key, owner, spec, opens, bytes, now)
  if spec == '' then return nil end
  local rate, period, max_n, max_b = string.match(spec, '^(%d+) (%d+) (%d+) (%d+)$')
  rate, period, max_n, max_b = tonumber(rate), tonumber(period), tonumber(max_n), tonumber(max_b)
  if max_n > 0 or max_b > 0 then
    local held = redis.call('HMGET', K.owners, 'n:' .. owner, 'b:' .. owner)
    if max_n > 0 and opens > 0 and tonumber(held[1] or 0) + opens > max_n then
      return {C.QUOTA_EXCEEDED, 'max_unfinished', 0, owner}
    end
    if max_b > 0 and bytes > 0 and tonumber(held[2] or 0) + bytes > max_b then
      return {C.QUOTA_EXCEEDED, 'max_unfinished_bytes', 0, owner}
    end
  end
  if rate == 0 then return nil end
  -- GCRA (a token bucket of `rate` calls refilled over `period`): each call moves the time the
  -- bucket is empty until on by period / rate; refused while that would pass now + period.
  local empty_until = math.max(tonumber(redis.call('GET', rate_key) or 0), now) + math.ceil(period / rate)
  if empty_until - now > period then return {C.QUOTA_EXCEEDED, 'rate', empty_until - now - period, owner} end
  return nil, empty_until
end

-- Stores the rate state quota_check returned (nothing when the quota has no rate).
local function quota_charge(rate_key, empty_until, now)
  if empty_until then redis.call('SET', rate_key, empty_until, 'PX', empty_until - now) end
end
