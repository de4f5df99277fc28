"""dispatch.lua: recording that an executor job exists for a task. One test per return code.

The executor is tests.support.fakes.FakeDispatcher (in memory).
"""

import pytest

from ghostless import Code, IllegalTransition, State, TaskNotFound
from tests.support.snapshots import raw_task, snapshot


def test_submitted_task_is_handed_to_the_executor_and_becomes_queued(dispatching, executor):
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice", priority=5)
    [(task_id, queue, dispatch_id)] = executor.enqueued
    assert (task_id, queue) == (task.id, "images")
    got, h = dispatching.get(task.id), raw_task(dispatching, task.id)
    assert (task.status, got.status, got.version) == (State.QUEUED, State.QUEUED, 2)
    assert h["dispatch_id"] == dispatch_id
    k = dispatching.keys.task(task.id)
    assert dispatching.redis.zscore(k.dispatch, task.id) == int(h["dispatched_at"]) + 300_000  # requeue_after
    event = dispatching.history(task.id)[-1]
    assert (event.verb, event.from_, event.to, event.reason) == ("dispatch", "PENDING", "QUEUED", "")
    assert dispatching.check() == []


def test_dispatching_a_queued_task_again_replaces_its_dispatch_id(dispatching, executor):
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice")
    second = dispatching.dispatch(task.id)
    assert raw_task(dispatching, task.id)["dispatch_id"] == second != executor.dispatches(task.id)[0]
    event = dispatching.history(task.id)[-1]
    assert (event.from_, event.to, event.reason) == ("QUEUED", "QUEUED", "redispatch")
    assert dispatching.check() == []


def test_dispatch_with_the_current_dispatch_id_is_replayed_and_only_rearms_the_job_check(dispatching, executor):
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice")
    before = snapshot(dispatching, task.id)
    reply = dispatching.scripts._call(
        "dispatch",
        dispatching.keys.task(task.id),
        [executor.dispatches(task.id)[0], 300_000],
        extra=[dispatching.keys.queue_key("images", "control")],
    )
    assert reply == [Code.REPLAYED, 2]
    after = snapshot(dispatching, task.id)
    old_check = before["tasks"][task.id]["sets"].pop("dispatch")
    assert after["tasks"][task.id]["sets"].pop("dispatch") >= old_check
    assert after == before
    assert dispatching.stats()["images"]["replayed"] == 0  # the sweeper's job check is no resent call


def test_dispatch_of_a_task_that_does_not_exist_is_task_not_found(dispatching):
    ghost = "images.0123456789abcdef0123"
    with pytest.raises(TaskNotFound):
        dispatching.scripts.dispatch(
            dispatching.keys.task(ghost), dispatching.keys.queue_key("images", "control"), ghost, "d-1", 1000
        )
    with pytest.raises(TaskNotFound):
        dispatching.dispatch(ghost)
    assert dispatching.redis.keys(f"*{ghost}*") == []


@pytest.mark.parametrize("state", [State.PROCESSING, State.SUCCESS])
def test_dispatch_of_a_task_not_pending_or_queued_is_an_illegal_transition(dispatching, state):
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = dispatching.claim(task.id, "w1")
    if state == State.SUCCESS:
        dispatching.complete(lease, {})
    before = snapshot(dispatching, task.id)
    with pytest.raises(IllegalTransition) as err:
        dispatching.scripts.dispatch(
            dispatching.keys.task(task.id), dispatching.keys.queue_key("images", "control"), task.id, "d-late", 1000
        )
    assert (err.value.state, err.value.verb) == (state, "dispatch")
    assert snapshot(dispatching, task.id) == before


DISPATCH_FIELDS = {"dispatch_id", "dispatched_at", "queued_at"}


def test_a_task_that_leaves_queued_keeps_none_of_its_dispatchs_fields(dispatching, executor):
    """A finished task is retained for days: what only a QUEUED task needs goes with its claim (or
    its cancel); the history's dispatch entry keeps when it was dispatched."""
    claimed, cancelled = (dispatching.submit("render", {"prompt": p}, owner="alice") for p in ("a", "b"))
    assert set(raw_task(dispatching, claimed.id)) >= DISPATCH_FIELDS and dispatching.get(claimed.id).queued_at
    lease = dispatching.claim(claimed.id, "w1", dispatch_id=executor.dispatches(claimed.id)[0])
    dispatching.complete(lease, {"url": "s3://a"})
    dispatching.cancel(cancelled.id, by="alice")
    for task in (claimed, cancelled):
        assert not DISPATCH_FIELDS & set(raw_task(dispatching, task.id))
        assert dispatching.get(task.id).queued_at is None
    assert [e.verb for e in dispatching.history(claimed.id)][:2] == ["submit", "dispatch"]
    assert dispatching.check() == []
