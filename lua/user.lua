-- User: the user an API token's digest names, with their record, read in one round trip.
-- From: (none)
-- To: (none)
-- KEYS[1]: the tokens hash (token digest -> user name); KEYS[2]: the users hash (name -> JSON record)
-- ARGV[1..4]: engine config; ARGV[5]: the token's SHA-256 digest (hex)
-- Returns: {OK, name, record JSON} | {OK} when no user's record is named by the digest (the caller
--   checks that the record still lists the digest: engine/core/users.py for_digest)
-- Read-only and never writing, it runs on a Redis at maxmemory.
local name = redis.call('HGET', KEYS[1], ARGV[5])
if not name then return {C.OK} end
local record = redis.call('HGET', KEYS[2], name)
if not record then return {C.OK} end
return {C.OK, name, record}
