-- Due: lists, read-only, what the sweeper must act on now, a batch from each deadline set given,
-- and from the queue's ended line the entries whose retention has passed.
-- From: (none)
-- To: (none)
-- KEYS[1..n]: deadline sets of one queue (dispatch, leases, retries, expiry: those the caller acts on),
--   then its ended line when ARGV[6] is '1'
-- ARGV[1..4]: engine config; ARGV[5]: batch size per set; ARGV[6]: '1' when the last key is the ended line
-- Returns: {OK, now, ids due in KEYS[1], ..., ids due in KEYS[n] (entries due, for the ended line),
--   ms until the earliest deadline in any of them (-1 when all are empty)}
local now = now_ms()
local out = {C.OK, now}
local next_at = -1
local function earliest(at)
  if next_at < 0 or at < next_at then next_at = at end
end
local sets = #KEYS
if ARGV[6] == '1' then sets = sets - 1 end
for i = 1, sets do
  out[#out + 1] = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now, 'LIMIT', 0, ARGV[5])
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if first[2] then earliest(tonumber(first[2])) end
end
if sets < #KEYS then
  -- Oldest first, so the due entries are at its head: up to the first that is not due (the head
  -- alone when it is not: a tick over a long line reads one entry).
  local due, head = {}, redis.call('LINDEX', KEYS[#KEYS], 0)
  local entries = {}
  if head and ended_due(head) > now then
    entries = {head}
  elseif head then
    entries = redis.call('LRANGE', KEYS[#KEYS], 0, tonumber(ARGV[5]) - 1)
  end
  for _, entry in ipairs(entries) do
    local at = ended_due(entry)
    if at > now then
      earliest(at)
      break
    end
    due[#due + 1] = entry
  end
  out[#out + 1] = due
end
if next_at >= 0 then next_at = math.max(0, next_at - now) end
out[#out + 1] = next_at
return out
