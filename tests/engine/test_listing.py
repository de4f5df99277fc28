"""Engine.list_tasks: an owner's tasks newest first, filters, cursor pages, admins see all."""

import pytest

from ghostless import Config, State
from tests.support.snapshots import purge_due_ms, sibling
from tests.support.wait import wait_for_server_time


def submit_many(engine, owner, n, type="render"):
    return [engine.submit(type, {"i": i}, owner=owner).id for i in range(n)]


def test_an_owner_sees_only_their_own_tasks_newest_first(engine):
    mine = submit_many(engine, "alice", 3)
    submit_many(engine, "bob", 2)
    tasks, cursor = engine.list_tasks(owner="alice")
    assert {t.id for t in tasks} == set(mine) and len(tasks) == 3 and cursor is None
    created = [t.created_at for t in tasks]
    assert created == sorted(created, reverse=True)


def test_pages_follow_the_cursor_without_gaps_or_repeats(engine):
    mine = submit_many(engine, "alice", 7) + submit_many(engine, "alice", 3, type="brief")  # two queues
    seen, cursor = [], None
    while True:
        page, cursor = engine.list_tasks(owner="alice", limit=3, cursor=cursor)
        seen += [t.id for t in page]
        if cursor is None:
            break
    assert sorted(seen) == sorted(mine) and len(seen) == len(set(seen))


@pytest.mark.parametrize("owner", ["alice", None])  # the owner's index, and the queue's (admins)
def test_tasks_created_in_the_same_millisecond_are_each_listed_once_across_scans(engine, monkeypatch, owner):
    import ghostless.core.listing as listing

    monkeypatch.setattr(listing, "SCAN", 3)  # each round reads 3 rows: scans cut through the millisecond
    mine = submit_many(engine, "alice", 8)
    for key in (engine.keys.owner_index("images", "alice"), engine.keys.queue_key("images", "index")):
        engine.redis.zadd(key, dict.fromkeys(mine, 1_700_000_000_000))  # as a burst within 1 ms leaves them
    for limit in (2, 5, 50):
        seen, cursor = [], None
        while True:
            page, cursor = engine.list_tasks(owner=owner, limit=limit, cursor=cursor)
            seen += [t.id for t in page]
            if cursor is None:
                break
        assert sorted(seen) == sorted(mine) and len(seen) == len(set(seen)), limit


def test_filters_by_status_type_and_queue(engine):
    a, b = submit_many(engine, "alice", 2)
    engine.cancel(a, by="alice")
    brief = engine.submit("brief", {}, owner="alice").id
    assert [t.id for t in engine.list_tasks(owner="alice", status="CANCELLED")[0]] == [a]
    assert [t.id for t in engine.list_tasks(owner="alice", type="brief")[0]] == [brief]
    assert {t.id for t in engine.list_tasks(owner="alice", queue="images")[0]} == {a, b}
    assert engine.list_tasks(owner="alice", queue="no-such-queue") == ([], None)


def test_admins_list_every_owner(engine):
    ids = submit_many(engine, "alice", 2) + submit_many(engine, "bob", 2)
    assert {t.id for t in engine.list_tasks(owner=None)[0]} == set(ids)


def test_an_edit_lists_the_new_task_for_the_same_owner(engine):
    old = engine.submit("render", {"prompt": "a"}, owner="alice")
    new = engine.edit(old.id, {"prompt": "b"}, by="admin", admin=True)
    listed = {t.id: t.status for t in engine.list_tasks(owner="alice")[0]}
    assert listed == {old.id: State.CANCELLED, new.id: State.PENDING}
    assert engine.check() == []


@pytest.mark.parametrize("kw", [{"limit": 0}, {"limit": 501}, {"limit": "5"}, {"cursor": "nope"}])
def test_bad_limits_and_cursors_are_value_errors(engine, kw):
    with pytest.raises(ValueError):
        engine.list_tasks(owner="alice", **kw)


def test_a_purged_task_leaves_its_owners_listing(engine):
    short = sibling(engine, config=Config(retention=0.05, idempotency_ttl=0.05))
    task = short.submit("render", {}, owner="alice")
    short.cancel(task.id, by="alice")
    wait_for_server_time(short.redis, purge_due_ms(short, task.id))
    assert short.sweep().purged == 1
    assert short.list_tasks(owner="alice") == ([], None)
    assert short.redis.zcard(short.keys.owner_index("images", "alice")) == 0
