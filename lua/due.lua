-- Due: lists, read-only, what the sweeper must act on now, a batch from each deadline set given.
-- From: (none)
-- To: (none)
-- KEYS[1..n]: deadline sets of one queue (dispatch, leases, retries, expiry: those the caller acts on)
-- ARGV[1..4]: engine config; ARGV[5]: batch size per set
-- Returns: {OK, now, ids due in KEYS[1], ..., ids due in KEYS[n], ms until the earliest
--   deadline in any of the sets (-1 when all are empty)}
local now = now_ms()
local out = {C.OK, now}
local next_at = -1
for i = 1, #KEYS do
  out[#out + 1] = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now, 'LIMIT', 0, ARGV[5])
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if first[2] then
    local at = tonumber(first[2])
    if next_at < 0 or at < next_at then next_at = at end
  end
end
if next_at >= 0 then next_at = math.max(0, next_at - now) end
out[#out + 1] = next_at
return out
