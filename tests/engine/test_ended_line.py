"""The ended line (TaskKeys.ended): one entry per ending, in the order tasks ended, from which the
sweeper purges a task once its retention has passed since it ended (lib/record place, purge.lua,
due.lua); tasks that ended before the line are purged from the expiry set as before."""

import pytest

from ghostless import Config, State
from ghostless.core import index
from ghostless.core.errors import Code
from tests.support.snapshots import GHOST, claimed, ended_entries, in_state, purge_due_ms, raw_task, sibling, snapshot
from tests.support.wait import wait_for_server_time

TERMINAL = [State.SUCCESS, State.FAILED, State.TIMEOUT, State.CANCELLED]


def short(engine, retention=0.05):
    return sibling(engine, config=Config(retention=retention, idempotency_ttl=retention))


def line(engine, queue="images"):
    return [
        e.decode() if isinstance(e, bytes) else e
        for e in engine.redis.lrange(engine.keys.queue_key(queue, "ended"), 0, -1)
    ]


def sweep_when_due(engine, task_id):
    wait_for_server_time(engine.redis, purge_due_ms(engine, task_id))
    return engine.sweep()


def to_expiry_set(engine, task_id):
    """Store an ended task as a release before the line did: in the expiry set, off the line."""
    k = engine.keys.task(task_id)
    [entry] = ended_entries(engine, task_id)
    engine.redis.lrem(k.ended, 1, entry)
    engine.redis.zadd(k.expiry, {task_id: int(entry.split(" ")[1]) + int(engine.config.retention * 1000)})


@pytest.mark.parametrize("state", TERMINAL)
def test_a_task_that_ends_is_appended_to_its_queues_ended_line_at_its_ending(engine, state):
    task, _ = in_state(engine, state)
    assert ended_entries(engine, task.id) == [f"{task.id} {raw_task(engine, task.id)['state_since']}"]
    assert engine.redis.zscore(engine.keys.task(task.id).expiry, task.id) is None
    assert engine.check() == []


def test_the_line_holds_endings_oldest_first(engine):
    tasks = [in_state(engine, State.SUCCESS)[0] for _ in range(3)]
    assert [e.split(" ")[0] for e in line(engine)] == [t.id for t in tasks]


def test_a_lost_heartbeat_retried_in_the_same_call_adds_no_entry(engine):
    task, _ = claimed(engine, "quick")
    wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000)
    assert engine.sweep().expired == 1
    assert engine.get(task.id).status == State.PENDING and ended_entries(engine, task.id) == []
    assert engine.check() == []


def test_the_sweepers_retention_counts_from_when_the_task_ended(engine):
    task, _ = in_state(engine, State.SUCCESS)  # ended by an engine keeping tasks 7 days
    quick = short(engine)
    assert sweep_when_due(quick, task.id).purged == 1
    assert quick.get(task.id) is None and line(quick) == []
    assert quick.check() == []


def test_a_task_is_not_purged_before_its_retention_and_the_sweeper_knows_when_to_look(engine):
    task, _ = in_state(engine, State.SUCCESS)
    slow = short(engine, retention=3600)
    report = slow.sweep()
    assert report.purged == 0 and engine.get(task.id).status == State.SUCCESS
    assert 3500 < report.next_in <= 3600
    assert ended_entries(engine, task.id) != []


def test_due_reads_the_line_without_changing_it(engine):
    quick = short(engine)
    task, _ = in_state(quick, State.CANCELLED)
    wait_for_server_time(quick.redis, purge_due_ms(quick, task.id))
    k = quick.keys.task(task.id)
    before = snapshot(quick, task.id)
    lists, next_ms = quick.scripts.due([k.leases], 10, ended=k.ended)
    assert [[x.decode() if isinstance(x, bytes) else x for x in got] for got in lists] == [
        [],
        ended_entries(quick, task.id),
    ]
    assert next_ms == -1 and snapshot(quick, task.id) == before


def test_a_retried_task_leaves_a_stale_entry_that_the_purge_drops_without_touching_the_task(engine):
    quick = short(engine)
    task, _ = in_state(quick, State.FAILED)
    [stale] = ended_entries(quick, task.id)
    quick.retry(task.id, by="alice")
    assert ended_entries(quick, task.id) == [stale] and quick.check() == []
    wait_for_server_time(quick.redis, purge_due_ms(quick, task.id))
    assert quick.sweep().purged == 0
    assert quick.get(task.id).status == State.PENDING and ended_entries(quick, task.id) == []
    assert quick.check() == []


def test_a_task_that_ends_twice_is_purged_by_its_second_ending_only(engine):
    quick = short(engine)
    task, _ = in_state(quick, State.FAILED)
    # the second ending in a later millisecond: an entry is told stale by its time (lua/purge.lua),
    # and two endings within one millisecond (seen in CI) share it, and their due time
    wait_for_server_time(quick.redis, int(raw_task(quick, task.id)["state_since"]))
    quick.retry(task.id, by="alice")
    quick.fail(quick.claim(task.id, "w2"), "boom", "again", retryable=False)
    first, second = ended_entries(quick, task.id)
    assert second == f"{task.id} {raw_task(quick, task.id)['state_since']}"
    k = quick.keys.task(task.id)
    assert quick.scripts.purge(k, task.id, index.head(k.index), None, first) == [Code.NOT_FOUND]  # stale: dropped
    assert quick.get(task.id).status == State.FAILED and ended_entries(quick, task.id) == [second]
    assert sweep_when_due(quick, task.id).purged == 1 and quick.get(task.id) is None
    assert quick.check() == []


def test_a_parent_kept_for_a_waiting_child_goes_to_the_lines_tail_with_a_kept_until(engine):
    quick = short(engine)
    a, b = (quick.submit("render", {"i": i}, owner="alice") for i in range(2))
    child = quick.submit("render", {}, owner="alice", depends_on=[a.id, b.id])
    quick.complete(quick.claim(a.id, "w1"), {})
    other, _ = in_state(quick, State.SUCCESS)  # ended after the parent
    assert sweep_when_due(quick, other.id).purged == 1  # other purged, the parent kept: it has a child waiting
    [kept] = ended_entries(quick, a.id)
    assert len(kept.split(" ")) == 3 and line(quick)[-1] == kept
    assert quick.get(a.id).status == State.SUCCESS and quick.check() == []
    quick.complete(quick.claim(b.id, "w1"), {})
    assert quick.get(child.id).status == State.PENDING and quick.get(child.id).waiting is False
    wait_for_server_time(quick.redis, purge_due_ms(quick, b.id))
    assert quick.sweep().purged == 2  # the parent (kept-until passed) and b
    assert quick.get(a.id) is None and ended_entries(quick, a.id) == []


def test_a_batch_of_due_entries_is_purged_batch_after_batch_in_one_sweep(engine):
    quick = short(engine)
    tasks = [in_state(quick, State.SUCCESS)[0] for _ in range(5)]
    wait_for_server_time(quick.redis, purge_due_ms(quick, tasks[-1].id))
    assert quick.sweep(batch=2).purged == 5
    assert line(quick) == [] and quick.check() == []


def test_an_entry_of_a_task_already_gone_is_dropped(engine):
    k = engine.keys.task(GHOST)
    engine.redis.rpush(k.ended, f"{GHOST} 0")
    assert engine.scripts.purge(k, GHOST, index.head(k.index), None, f"{GHOST} 0") == [Code.NOT_FOUND]
    assert engine.redis.llen(k.ended) == 0


def test_a_task_that_ended_before_the_line_is_purged_from_the_expiry_set(engine):
    quick = short(engine)
    task, _ = in_state(quick, State.SUCCESS)
    to_expiry_set(quick, task.id)
    assert quick.check() == []
    wait_for_server_time(quick.redis, quick.redis.zscore(quick.keys.task(task.id).expiry, task.id))
    assert quick.sweep().purged == 1 and quick.get(task.id) is None
    assert quick.check() == []


def test_a_task_that_ended_before_the_line_leaves_the_expiry_set_when_retried(engine):
    task, _ = in_state(engine, State.FAILED)
    to_expiry_set(engine, task.id)
    engine.retry(task.id, by="alice")
    assert engine.redis.zscore(engine.keys.task(task.id).expiry, task.id) is None
    assert engine.check() == []


def test_check_reports_an_ended_task_missing_from_the_line_and_an_entry_of_no_task(engine):
    task, _ = in_state(engine, State.SUCCESS)
    k = engine.keys.task(task.id)
    engine.redis.delete(k.ended)
    engine.redis.rpush(k.ended, f"{GHOST} 1")
    problems = engine.check()
    assert any(p.startswith(f"{task.id}: SUCCESS since") and "ended line" in p for p in problems)
    assert any(p.startswith(f"{GHOST}: on the ended line") for p in problems)
