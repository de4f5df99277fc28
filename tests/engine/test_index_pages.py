"""Task indexes in pages (lua/lib/index.lua, engine/core/index.py): a queue's index and an owner's
move their full head into a page of at most INDEX_PAGE tasks, and every reader sees every task."""

import pytest

from ghostless import Config, State
from ghostless.core import index
from ghostless.core.errors import Code
from ghostless.core.keys import INDEX_PAGE, index_page, index_pages
from ghostless.core.steps import Command, drive
from tests.support.snapshots import ended_entries, purge_due_ms, raw_task, sibling, task_snapshot
from tests.support.wait import wait_for_server_time

N = 2 * INDEX_PAGE + 44  # two pages and a head


def submit_many(engine, n, owner="alice"):
    return [engine.submit("render", {"i": i}, owner=owner).id for i in range(n)]


def pages(engine, index_key):
    return [
        (n.decode() if isinstance(n, bytes) else n, s)
        for n, s in engine.redis.zrange(index_pages(index_key), 0, -1, withscores=True)
    ]


def listed(engine, owner, limit):
    seen, cursor = [], None
    while True:
        page, cursor = engine.list_tasks(owner=owner, limit=limit, cursor=cursor)
        seen += [t.id for t in page]
        if cursor is None:
            return seen


def newest_first(engine, ids):
    created = {i: raw_task(engine, i).get("listed_at") or raw_task(engine, i)["created_at"] for i in ids}
    return sorted(ids, key=lambda i: (-int(created[i]), tuple(-b for b in i.encode())))


@pytest.fixture
def many(engine):
    return submit_many(engine, N)


def test_a_full_head_moves_into_pages_of_at_most_a_page_of_tasks_each(engine, many):
    for head in (engine.keys.queue_index("images"), engine.keys.owner_index("images", "alice")):
        named = pages(engine, head)
        assert len(named) == 2, named
        sizes = [engine.redis.zcard(index_page(head, n)) for n, _ in named]
        assert all(0 < s <= INDEX_PAGE for s in sizes) and sum(sizes) + engine.redis.zcard(head) == N
        assert index.count(engine.redis, head) == N
        if not type(engine.redis).__module__.startswith("fakeredis"):  # fakeredis keeps no encodings
            for key in [head, *(index_page(head, n) for n, _ in named)]:
                assert engine.redis.object("encoding", key) in (b"listpack", b"ziplist"), key
    assert engine.check() == []


@pytest.mark.parametrize("owner", ["alice", None])  # the owner's index, and the queue's (admins)
def test_every_task_is_listed_once_newest_first_across_pages(engine, many, owner):
    other = submit_many(engine, 3, owner="bob")
    expected = newest_first(engine, many + (other if owner is None else []))
    for limit in (50, 7, 500):
        assert listed(engine, owner, limit) == expected, limit


def test_purged_tasks_leave_their_pages_and_empty_pages_leave_the_directory(engine, many):
    quick = sibling(engine, config=Config(retention=0.05, idempotency_ttl=0.05))
    for tid in many:
        quick.cancel(tid, by="alice")
    wait_for_server_time(quick.redis, purge_due_ms(quick, many[-1]))
    report = quick.sweep(batch=N)
    assert report.purged == N
    for head in (quick.keys.queue_index("images"), quick.keys.owner_index("images", "alice")):
        assert index.count(quick.redis, head) == 0 and pages(quick, head) == []
    assert quick.list_tasks(owner="alice") == ([], None) and quick.check() == []


def test_a_purge_routed_before_a_head_moved_is_refused_as_moved_and_the_sweeper_routes_again(engine):
    quick = sibling(engine, config=Config(retention=0.05, idempotency_ttl=0.05))
    [first] = submit_many(quick, 1)
    quick.cancel(first, by="alice")
    k, head = quick.keys.task(first), quick.keys.queue_index("images")
    stale = index.head(head), index.head(quick.keys.owner_index("images", "alice"))
    submit_many(quick, INDEX_PAGE + 1)  # the head it was routed to moved into a page
    wait_for_server_time(quick.redis, purge_due_ms(quick, first))
    [entry] = ended_entries(quick, first)
    assert quick.scripts.purge(k, first, *stale, entry) == [Code.MOVED]
    assert quick.get(first).status == State.CANCELLED and quick.check() == []
    assert quick.sweep().purged == 1 and quick.get(first) is None
    assert quick.check() == []


def test_a_task_created_while_the_clock_is_behind_its_index_is_listed_at_the_index_newest_time(engine):
    [a] = submit_many(engine, 1)
    ahead = int(raw_task(engine, a)["created_at"]) + 3_600_000  # as made on a primary an hour ahead
    engine.redis.hset(engine.keys.task(a).task, "created_at", ahead)
    for head in (engine.keys.queue_index("images"), engine.keys.owner_index("images", "alice")):
        engine.redis.zadd(head, {a: ahead})
    events = engine.keys.task(a).events
    [(_, fields)] = engine.redis.xrevrange(events, count=1)
    engine.redis.xadd(events, fields, id=f"{ahead}-0")  # its submit event, stamped by that primary's clock
    [b] = submit_many(engine, 1)
    stored = raw_task(engine, b)
    assert int(stored["listed_at"]) == ahead and int(stored["created_at"]) < ahead  # created at the server's time
    engine.complete(engine.claim(b, "w1"), {})
    submitted, claimed, completed = (e.at for e in engine.history(b))  # read back as recorded, from its creation
    assert submitted == int(stored["created_at"]) / 1000 and submitted <= claimed <= completed < ahead / 1000
    assert engine.redis.zscore(engine.keys.queue_index("images"), b) == ahead  # beside a, not before it
    assert listed(engine, "alice", 50) == newest_first(engine, [a, b]) and engine.check() == []


def test_a_head_of_one_millisecond_grows_past_a_page_rather_than_split_it(engine):
    ids = submit_many(engine, INDEX_PAGE)
    same = int(raw_task(engine, ids[-1])["created_at"]) + 3_600_000
    for head in (engine.keys.queue_index("images"), engine.keys.owner_index("images", "alice")):
        engine.redis.zadd(head, dict.fromkeys(ids, same))
    for tid in ids:
        engine.redis.hset(engine.keys.task(tid).task, "listed_at", same)
    events = engine.keys.task(ids[-1]).events
    [(_, fields)] = engine.redis.xrevrange(events, count=1)
    engine.redis.xadd(events, fields, id=f"{same}-0")  # as a primary an hour ahead stamped it
    [last] = submit_many(engine, 1)
    assert engine.redis.zcard(engine.keys.queue_index("images")) == INDEX_PAGE + 1
    assert pages(engine, engine.keys.queue_index("images")) == []
    assert sorted(listed(engine, "alice", 50)) == sorted([*ids, last]) and engine.check() == []


def test_an_index_from_before_pages_becomes_the_first_page_as_it_is(engine, many):
    for head in (engine.keys.queue_index("images"), engine.keys.owner_index("images", "alice")):
        for key in index.keys_of(engine.redis, head)[1:]:  # one zset of every task, as before pages
            engine.redis.zunionstore(head, [head, key], aggregate="MAX")
            engine.redis.delete(key)
        engine.redis.delete(index_pages(head))
        assert engine.redis.zcard(head) == N
    assert listed(engine, None, 50) == newest_first(engine, many) and engine.check() == []
    [new] = submit_many(engine, 1)
    for head in (engine.keys.queue_index("images"), engine.keys.owner_index("images", "alice")):
        [(name, _)] = pages(engine, head)
        kept = engine.redis.zcard(head) - 1  # its newest millisecond's tasks stay in the head, with the new one
        assert name == new and kept >= 1 and engine.redis.zcard(index_page(head, name)) == N - kept
        assert index.count(engine.redis, head) == N + 1
    assert listed(engine, "alice", 50) == newest_first(engine, [*many, new]) and engine.check() == []


def test_check_finds_a_task_outside_its_page_and_an_empty_page_in_the_directory(engine, many):
    head = engine.keys.queue_index("images")
    (older, _), (newer, _) = pages(engine, head)
    moved = engine.redis.zrange(index_page(head, older), 0, 0)[0]
    moved = moved.decode() if isinstance(moved, bytes) else moved
    engine.redis.zadd(index_page(head, newer), {moved: engine.redis.zscore(index_page(head, older), moved)})
    engine.redis.zrem(index_page(head, older), moved)
    engine.redis.zadd(index_pages(head), {"gone": 1})
    problems = engine.check()
    assert any(moved in p and "outside its bounds" in p for p in problems), problems
    assert any("page gone is in the directory but empty" in p for p in problems), problems


def test_a_listing_reads_on_by_bound_so_a_page_emptied_between_its_reads_costs_no_other_page(engine):
    head = engine.keys.queue_index("images")
    for i in range(10):  # pages thinned by purges to 4 tasks each, bounds 1000, 2000, ...
        engine.redis.zadd(index_page(head, f"p{i}"), {f"images.{i:02d}{j:018x}": 1000 * i + j for j in range(1, 5)})
        engine.redis.zadd(index_pages(head), {f"p{i}": 1000 * (i + 1)})
    engine.redis.zadd(head, {"images.h1": 10_001, "images.h2": 10_002})
    reads = []

    def do(step):  # a sweeper empties page p8, read in the first round, before the second reads on
        if isinstance(step, Command) and step.args[0] == index_pages(head):
            engine.redis.delete(index_page(head, "p8"))
            engine.redis.zrem(index_pages(head), "p8")
        reads.append(step)
        return engine._do(step)

    got = drive(index.rows(head, "+inf", 0, 200), do)
    expected = sorted(
        [(10_002, "images.h2"), (10_001, "images.h1")]
        + [(1000 * i + j, f"images.{i:02d}{j:018x}") for i in range(10) if i != 8 for j in range(1, 5)],
        key=index.newest_first,
    )
    assert [r for r in got if not r[1].startswith("images.08")] == expected
    assert len(reads) >= 3  # the directory was read on, after the first round's pages


def test_rows_read_across_pages_equal_one_zset_read_with_the_same_top_offset_and_count(engine):
    head, whole = engine.keys.queue_index("images"), engine.keys.queue_key("images", "scratch")
    sizes = [64, 3, 0, 200, 1, 64, 17]  # full, thin, emptied (not in the directory), one ms of 200, ...
    score = 1_000
    for i, size in enumerate(sizes):
        rows = {f"images.{i:02d}{j:018x}": score + (0 if size == 200 else j) for j in range(size)}
        score += 1_000
        if rows:
            engine.redis.zadd(index_page(head, f"p{i}"), rows)
            engine.redis.zadd(index_pages(head), {f"p{i}": score})
        engine.redis.zadd(whole, rows or {"images.gone": 0})
    engine.redis.zrem(whole, "images.gone")
    engine.redis.zadd(head, {f"images.h{j:019x}": score + j // 2 for j in range(30)})
    engine.redis.zunionstore(whole, [whole, head])
    tops = ["+inf", score + 5, score, 4_000, 4_999, 5_000, 3_000, 1_001, 999]
    for top in tops:
        for offset in (0, 1, 29, 30, 31, 64, 150, 230, 400):
            for num in (1, 3, 50, 200):
                got = drive(index.rows(head, top, offset, num), engine._do)
                want = engine.redis.zrevrangebyscore(whole, top, "-inf", start=offset, num=num, withscores=True)
                assert got == [(int(s), m.decode() if isinstance(m, bytes) else m) for m, s in want], (top, offset, num)


def test_an_offset_deep_in_one_millisecond_is_skipped_by_redis_not_read_and_dropped(engine):
    head = engine.keys.queue_index("images")  # a clock behind for a while: 1,000 tasks listed at one time
    engine.redis.zadd(head, {f"images.{j:020x}": 7_000 for j in range(1_000)})
    engine.redis.zadd(index_page(head, "p0"), {f"images.p{j:019x}": 100 + j for j in range(40)})
    engine.redis.zadd(index_pages(head), {"p0": 7_000})
    rows_read = []

    def do(step):
        reply = engine._do(step)
        for command, answer in zip(getattr(step, "commands", [step]), reply if hasattr(step, "commands") else [reply]):
            if command.kwargs.get("withscores") and command.args[0] != index_pages(head):
                rows_read.append(len(answer))
        return reply

    got = drive(index.rows(head, 7_000, 980, 50), do)
    assert [m for _, m in got] == [f"images.{j:020x}" for j in range(19, -1, -1)] + [
        f"images.p{j:019x}" for j in range(39, 9, -1)
    ]
    assert sum(rows_read) == 50  # what it returns, not the 980 rows before them


def test_a_task_moved_into_a_page_snapshots_as_before(engine):
    ids = submit_many(engine, INDEX_PAGE)
    before = task_snapshot(engine, ids[0])
    submit_many(engine, 1)  # moves the head, ids[0] with it, into a page
    assert pages(engine, engine.keys.queue_index("images")) and task_snapshot(engine, ids[0]) == before
    assert before["sets"]["index"] == int(raw_task(engine, ids[0])["created_at"])


def test_a_head_whose_newest_millisecond_holds_thousands_of_tasks_still_moves_into_a_page(engine):
    head = engine.keys.queue_index("images")  # as a bench's clones or an index from before pages leave it
    t, _ = engine.redis.time()
    now = t * 1000 - 1_000
    engine.redis.zadd(head, {"images.old": now - 1} | {f"images.{j:020x}": now for j in range(5_000)})
    [new] = submit_many(engine, 1)
    [(name, bound)] = pages(engine, head)
    [old] = engine.redis.zrange(index_page(head, name), 0, -1)
    assert name == new and bound == now and old in (b"images.old", "images.old")
    assert engine.redis.zcard(head) == 5_001 and engine.redis.zscore(head, new) >= now


def test_a_check_scan_that_a_submit_moves_the_head_under_reads_again(engine):
    ids = submit_many(engine, INDEX_PAGE)
    head, late = engine.keys.owner_index("images", "alice"), []

    class Racing:  # the client, but a submit moves the head just before the scan first reads it
        def __getattr__(self, name):
            return getattr(engine.redis, name)

        def zrange(self, key, *args, **kwargs):
            if key == head and not late:
                late.append(submit_many(engine, 1)[0])
            return engine.redis.zrange(key, *args, **kwargs)

    found, problems = index.scan(Racing(), head)
    assert problems == [] and set(found) == {*ids, *late} and pages(engine, head)
