--- Task indexes (a queue's, an owner's): zsets of task ids by creation time, kept in pages of about
-- INDEX_PAGE tasks so that each stays a listpack (about 42 B a task, against 129 B in a skiplist).
--
-- An index is its head (the key a submit adds to), a directory of older pages (page name -> bound)
-- and the pages. A page holds the tasks created before its bound and at or after the bound of the
-- next older page; the head holds those at or after the newest bound. So the pages and the head
-- never overlap, and a task's creation time names its page (index_route). A submit that finds the
-- head full moves it whole into a page (RENAMENX: the page keeps the head's listpack), except the
-- tasks of its newest millisecond, which stay in the head: a bound falls between two milliseconds.
-- A task's creation time is never before its indexes' newest (lib/record create, index_time), so a
-- submit always adds to the head.
-- An index from before pages is a head of any size: the first submit that finds it full makes it
-- the first page, as it is. engine/core/index.py reads them; engine/core/check.py checks them.
-- I: {head = zset, pages = directory zset, page = the page this call would make (keys.py IndexKeys)}.

-- The index passed as KEYS[i..i+2] (head, pages, page: keys.py IndexKeys).
local function index_at(i)
  return {head = KEYS[i], pages = KEYS[i + 1], page = KEYS[i + 2]}
end

-- The time to create a task at, given the time so far: that, or the index's newest time where the
-- clock went back behind it (a failover to a replica whose clock is behind): the head's newest, else
-- the newest bound.
local function index_time(I, at)
  local newest = redis.call('ZREVRANGE', I.head, 0, 0, 'WITHSCORES')[2]
  if not newest then newest = redis.call('ZREVRANGE', I.pages, 0, 0, 'WITHSCORES')[2] end
  if newest and tonumber(newest) > at then return tonumber(newest) end
  return at
end

-- Moves a full head into page I.page, named `name` in the directory, but for its newest millisecond.
local function index_roll(I, name)
  local low = redis.call('ZRANGE', I.head, 0, 0, 'WITHSCORES')[2]
  local top = redis.call('ZREVRANGE', I.head, 0, 0, 'WITHSCORES')[2]
  if low == top or redis.call('RENAMENX', I.head, I.page) == 0 then return end  -- one millisecond: no bound
  -- Copied by Redis, not through Lua: a millisecond may hold more tasks than unpack takes.
  redis.call('ZRANGESTORE', I.head, I.page, top, top, 'BYSCORE')
  redis.call('ZREMRANGEBYSCORE', I.page, top, top)
  redis.call('ZADD', I.pages, top, name)
end

-- Adds task `id` created at `at` (its text) to index I; `name`: the new task's id, the name of the
-- page a full head moves into.
local function index_add(I, at, id, name)
  if redis.call('ZCARD', I.head) >= INDEX_PAGE then index_roll(I, name) end
  redis.call('ZADD', I.head, at, id)
end

-- The name of the page that holds the tasks created at `at` ('' for the head).
local function index_route(pages, at)
  return redis.call('ZRANGEBYSCORE', pages, '(' .. at, '+inf', 'LIMIT', 0, 1)[1] or ''
end

-- Removes task `id` from `key`, its page named `name` ('' for the head) in directory `pages`,
-- and the page's name from the directory once the page is empty.
local function index_remove(pages, key, name, id)
  redis.call('ZREM', key, id)
  if name ~= '' and redis.call('EXISTS', key) == 0 then redis.call('ZREM', pages, name) end
end
