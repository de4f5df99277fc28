"""depends_on: a child waits until every parent is SUCCESS; a parent that ends otherwise cancels it."""

import pytest

from ghostless import Config, IllegalTransition, State, UnknownTaskType
from ghostless.core.errors import UnknownParent
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import purge_due_ms, sibling
from tests.support.wait import wait_for_server_time


def finish(engine, task_id, ok=True):
    lease = engine.claim(task_id, "w1")
    engine.complete(lease, {}) if ok else engine.fail(lease, "bad_prompt", "no", retryable=False)


def test_a_child_waits_until_its_last_parent_succeeds_then_is_dispatched_at_once(engine):
    executor = FakeDispatcher()
    e = sibling(engine, dispatcher=executor)
    a, b = (e.submit("render", {"i": i}, owner="alice") for i in range(2))
    child = e.submit("render", {}, owner="alice", depends_on=[a.id, b.id])
    got = e.get(child.id)
    assert (got.status, got.waiting, got.parents) == (State.PENDING, True, [a.id, b.id])
    assert executor.dispatches(child.id) == [] and e.check() == []
    finish(e, a.id)
    assert e.get(child.id).waiting
    finish(e, b.id)  # the last parent: the child is resolved and dispatched in the same call
    got = e.get(child.id)
    assert (got.status, got.waiting) == (State.QUEUED, False) and len(executor.dispatches(child.id)) == 1
    assert [ev.reason for ev in e.history(child.id) if ev.verb == "resolve"] == ["dependencies met"]
    assert e.check() == []


def test_a_waiting_child_can_be_neither_claimed_nor_dispatched_before_its_parents_succeed(engine):
    executor = FakeDispatcher()
    e = sibling(engine, dispatcher=executor)
    parent = e.submit("render", {}, owner="alice")
    child = e.submit("render", {}, owner="alice", depends_on=[parent.id])
    with pytest.raises(IllegalTransition, match="waiting on its parents"):
        e.claim(child.id, "w1")
    assert e.dispatch(child.id) is None and executor.dispatches(child.id) == []
    got = e.get(child.id)
    assert (got.status, got.waiting) == (State.PENDING, True) and e.check() == []
    finish(e, parent.id)
    assert e.get(child.id).status == State.QUEUED  # then it goes, as usual


def test_a_childs_delay_still_counts_once_its_parents_succeed(engine):
    executor = FakeDispatcher()
    e = sibling(engine, dispatcher=executor)
    parent = e.submit("render", {}, owner="alice")
    child = e.submit("render", {}, owner="alice", depends_on=[parent.id], delay=3600)
    finish(e, parent.id)
    got = e.get(child.id)
    assert (got.status, got.waiting, executor.dispatches(child.id)) == (State.PENDING, False, [])
    due = e.redis.zscore(e.keys.task(child.id).dispatch, child.id) / 1000
    assert due - got.created_at >= 3600 - 1  # in the dispatch set at its delay, as without parents
    assert e.sweep().dispatched == 0 and e.check() == []


def test_a_succeeded_parent_outlives_its_retention_while_a_child_still_waits_on_it(engine):
    short = sibling(engine, config=Config(retention=0.05, idempotency_ttl=0.05))
    a, b = (short.submit("render", {"i": i}, owner="alice") for i in range(2))
    child = short.submit("render", {}, owner="alice", depends_on=[a.id, b.id])
    finish(short, a.id)
    wait_for_server_time(short.redis, purge_due_ms(short, a.id))
    assert short.sweep().purged == 0 and short.get(a.id).status == State.SUCCESS
    finish(short, b.id)
    got = short.get(child.id)
    assert (got.status, got.waiting, got.reason) == (State.PENDING, False, "")  # not dependency_failed
    assert short.check() == []


@pytest.mark.parametrize("ending", ["fail", "cancel", "edit"])
def test_a_parent_that_does_not_succeed_cancels_the_child_naming_it(engine, ending):
    parent = engine.submit("render", {}, owner="alice")
    child = engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    if ending == "fail":
        finish(engine, parent.id, ok=False)
    elif ending == "cancel":
        engine.cancel(parent.id, by="alice")
    else:
        engine.edit(parent.id, {"prompt": "other"}, by="alice")
    got = engine.get(child.id)
    assert (got.status, got.reason) == (State.CANCELLED, f"dependency_failed:{parent.id}")
    assert engine.check() == []


def test_cancellation_cascades_to_grandchildren(engine):
    a = engine.submit("render", {}, owner="alice")
    b = engine.submit("render", {}, owner="alice", depends_on=[a.id])
    c = engine.submit("render", {}, owner="alice", depends_on=[b.id])
    engine.cancel(a.id, by="alice")
    assert engine.get(c.id).reason == f"dependency_failed:{b.id}"


def test_depending_on_tasks_already_done_starts_at_once_or_is_cancelled_at_once(engine):
    ok, bad = (engine.submit("render", {"i": i}, owner="alice") for i in range(2))
    finish(engine, ok.id)
    finish(engine, bad.id, ok=False)
    ready = engine.submit("render", {}, owner="alice", depends_on=[ok.id])
    assert not engine.get(ready.id).waiting
    doomed = engine.submit("render", {}, owner="alice", depends_on=[ok.id, bad.id])
    assert engine.get(doomed.id).reason == f"dependency_failed:{bad.id}"
    assert engine.check() == []


def test_an_edited_child_keeps_waiting_on_the_same_parents(engine):
    parent = engine.submit("render", {}, owner="alice")
    child = engine.submit("render", {"v": 1}, owner="alice", depends_on=[parent.id])
    new = engine.edit(child.id, {"v": 2}, by="alice")
    assert new.waiting and new.parents == [parent.id]
    finish(engine, parent.id)
    assert not engine.get(new.id).waiting and engine.get(new.id).status == State.PENDING
    assert engine.check() == []


def test_the_sweeper_resolves_a_child_whose_resolution_was_missed(engine):
    parent = engine.submit("render", {}, owner="alice")
    child = engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    engine.scripts.on_resolve = None  # as if the completing process died right after complete
    finish(engine, parent.id)
    assert engine.get(child.id).waiting
    assert engine.sweep().resolved == 1
    assert not engine.get(child.id).waiting


def test_unknown_parents_and_other_queues_are_rejected_at_submit(engine):
    with pytest.raises(UnknownParent):
        engine.submit("render", {}, owner="alice", depends_on=["images.0123456789abcdef0123"])
    other = engine.submit("brief", {}, owner="alice")  # queue "other"
    with pytest.raises(ValueError, match=r"same|child's queue"):
        engine.submit("render", {}, owner="alice", depends_on=[other.id])
    with pytest.raises(ValueError):
        engine.submit("render", {}, owner="alice", depends_on="images.0123456789abcdef0123")
    assert engine.stats()["images"]["counts"]["PENDING"] == 0


def test_a_cycle_cannot_be_built(engine):
    # A parent must exist before its child, and a task's parents never change: no cycle can form.
    a = engine.submit("render", {}, owner="alice")
    b = engine.submit("render", {}, owner="alice", depends_on=[a.id])
    assert engine.get(a.id).parents == [] and engine.get(b.id).parents == [a.id]
    with pytest.raises((UnknownParent, UnknownTaskType, ValueError)):
        engine.submit("render", {}, owner="alice", depends_on=["images.ffffffffffffffffffff"])
