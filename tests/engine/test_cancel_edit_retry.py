"""cancel.lua, edit.lua, retry.lua: what a task's owner (or an admin) may do to it.

One test per return code of each script. Owner checks happen inside the scripts: another
owner's task looks exactly like a missing one (TaskNotFound); admin=True may act on any task.
"""

import pytest

from ghostless import Code, IllegalTransition, LeaseLost, State, TaskCancelled, TaskNotFound
from ghostless.core.keys import new_task_id
from ghostless.core.lua_source import call_keys
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import GHOST, ended_at, in_state, raw_task, sibling, snapshot


def submitted(engine, type="render", **kw):
    return engine.submit(type, {"prompt": "a cat"}, owner="alice", **kw)


# -- cancel ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [State.PENDING, State.PROCESSING, State.RETRY_WAITING])
def test_owner_cancels_a_task_that_has_not_ended(engine, state):
    task, _ = in_state(engine, state)
    engine.cancel(task.id, by="alice", reason="changed my mind")
    got = engine.get(task.id)
    assert (got.status, got.error_kind, got.reason) == (State.CANCELLED, "cancelled", "changed my mind")
    assert got.finished_at is not None
    assert raw_task(engine, task.id)["cancelled_by"] == "alice"
    k = engine.keys.task(task.id)
    assert [
        name
        for name in ("dispatch", "leases", "retries", "expiry")
        if engine.redis.zscore(getattr(k, name), task.id) is not None
    ] == []
    assert ended_at(engine, task.id) == int(raw_task(engine, task.id)["state_since"])
    event = engine.history(task.id)[-1]
    assert (event.verb, event.from_, event.to, event.by) == ("cancel", state, "CANCELLED", "alice")
    assert engine.check() == []


def test_owner_cancels_a_queued_task(engine):
    engine = sibling(engine, dispatcher=FakeDispatcher())
    task = submitted(engine)
    engine.cancel(task.id, by="alice")
    assert engine.get(task.id).status == State.CANCELLED
    assert engine.check() == []


def test_cancel_of_a_processing_task_stops_its_lease_holder(engine):
    task, lease = in_state(engine, State.PROCESSING)
    engine.cancel(task.id, by="alice")
    with pytest.raises(TaskCancelled):
        engine.heartbeat(lease)
    with pytest.raises(TaskCancelled):
        engine.complete(lease, {"url": "too late"})
    got = engine.get(task.id)
    assert (got.status, got.result) == (State.CANCELLED, None)
    assert engine.check() == []


def test_cancelling_a_cancelled_task_is_replayed_and_changes_nothing(engine):
    task, _ = in_state(engine, State.CANCELLED)
    before = snapshot(engine, task.id)
    engine.cancel(task.id, by="alice", reason="again")
    assert snapshot(engine, task.id) == before
    reply = engine.scripts._call("cancel", engine.keys.task(task.id), ["alice", "0", "again"])
    assert reply == [Code.REPLAYED, engine.get(task.id).version]


def test_cancel_of_another_owners_task_is_task_not_found_and_admin_may_cancel_it(engine):
    task = submitted(engine)
    before = snapshot(engine, task.id)
    with pytest.raises(TaskNotFound):
        engine.cancel(task.id, by="mallory")
    assert snapshot(engine, task.id) == before
    engine.cancel(task.id, by="root", admin=True)
    assert engine.get(task.id).status == State.CANCELLED
    assert engine.history(task.id)[-1].by == "root"


def test_cancel_of_a_task_that_does_not_exist_is_task_not_found(engine):
    with pytest.raises(TaskNotFound):
        engine.cancel(GHOST, by="alice", admin=True)
    assert engine.redis.keys(f"*{GHOST}*") == []


@pytest.mark.parametrize("state", [State.SUCCESS, State.FAILED, State.TIMEOUT])
def test_cancel_of_a_task_that_has_ended_is_an_illegal_transition(engine, state):
    task, _ = in_state(engine, state)
    before = snapshot(engine, task.id)
    with pytest.raises(IllegalTransition) as err:
        engine.cancel(task.id, by="alice")
    assert (err.value.task_id, err.value.state, err.value.verb) == (task.id, state, "cancel")
    assert snapshot(engine, task.id) == before


# -- edit -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [State.PENDING, State.RETRY_WAITING])
def test_edit_cancels_the_task_and_submits_its_replacement_linked_both_ways(engine, state):
    old, _ = in_state(engine, state)
    settings = {k: raw_task(engine, old.id)[k] for k in ("lease_ms", "timeout_ms", "backoff")}
    new = engine.edit(old.id, {"prompt": "a dog"}, by="alice")
    got_old = engine.get(old.id)
    assert (got_old.status, got_old.superseded_by, got_old.reason) == (
        State.CANCELLED,
        new.id,
        f"superseded by {new.id}",
    )
    assert (new.status, new.supersedes, new.args, new.attempt, new.version) == (
        State.PENDING,
        old.id,
        {"prompt": "a dog"},
        0,
        1,
    )
    assert (new.type, new.owner, new.queue, new.max_attempts, new.priority) == (
        old.type,
        old.owner,
        old.queue,
        old.max_attempts,
        old.priority,
    )
    assert {k: raw_task(engine, new.id)[k] for k in settings} == settings  # the cancelled task keeps none
    assert (engine.history(old.id)[-1].verb, engine.history(old.id)[-1].by) == ("edit", "alice")
    [first] = engine.history(new.id)
    assert (first.to, first.by, first.reason) == ("PENDING", "alice", f"edit of {old.id}")
    assert engine.stats()["images"]["counts"]["PENDING"] == 1
    assert engine.check() == []


def test_edit_of_a_processing_task_stops_its_lease_holder(engine):
    old, lease = in_state(engine, State.PROCESSING)
    new = engine.edit(old.id, {"prompt": "a dog"}, by="alice")
    with pytest.raises(TaskCancelled):
        engine.heartbeat(lease)
    assert engine.claim(new.id, "w2").args == {"prompt": "a dog"}
    assert engine.check() == []


def test_edit_with_an_executor_dispatches_the_replacement(engine):
    executor = FakeDispatcher()
    engine = sibling(engine, dispatcher=executor)
    old = submitted(engine)
    new = engine.edit(old.id, {"prompt": "a dog"}, by="alice")
    assert new.status == State.QUEUED and len(executor.dispatches(new.id)) == 1
    assert engine.check() == []


def test_resent_edit_with_the_same_new_id_is_replayed_and_changes_nothing(engine):
    old = submitted(engine)
    new_id = new_task_id("images")
    old_keys, new_keys = (call_keys("edit", engine.keys.task(t)) for t in (old.id, new_id))
    keys = [*old_keys, *new_keys, engine.keys.owner_index("images", "alice")]
    argv = ["alice", "0", new_id, '{"prompt":"a dog"}']
    assert engine.scripts._call("edit", keys, argv)[:2] == [Code.OK, new_id]
    before = snapshot(engine, old.id, new_id)
    assert engine.scripts._call("edit", keys, argv) == [Code.REPLAYED, new_id]
    assert snapshot(engine, old.id, new_id) == before


def test_edit_of_another_owners_task_is_task_not_found_and_admin_may_edit_it(engine):
    old = submitted(engine)
    before = snapshot(engine, old.id)
    with pytest.raises(TaskNotFound):
        engine.edit(old.id, {"prompt": "a dog"}, by="mallory")
    assert snapshot(engine, old.id) == before
    assert [k for k in engine.redis.keys("*:task:*") if old.id.encode() not in k] == []  # no replacement
    new = engine.edit(old.id, {"prompt": "a dog"}, by="root", admin=True)
    assert (new.owner, new.supersedes) == ("alice", old.id)
    assert engine.check() == []


def test_edit_of_a_task_that_does_not_exist_is_task_not_found(engine):
    with pytest.raises(TaskNotFound):
        engine.edit(GHOST, {"prompt": "a dog"}, by="alice", admin=True)
    assert engine.redis.keys("*:task:*") == []


@pytest.mark.parametrize("state", [State.SUCCESS, State.CANCELLED])
def test_edit_of_a_task_that_has_ended_is_an_illegal_transition(engine, state):
    old, _ = in_state(engine, state)
    before = snapshot(engine, old.id)
    with pytest.raises(IllegalTransition) as err:
        engine.edit(old.id, {"prompt": "a dog"}, by="alice")
    assert (err.value.state, err.value.verb) == (state, "edit")
    assert snapshot(engine, old.id) == before
    assert engine.stats()["images"]["counts"]["PENDING"] == 0


# -- retry ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [State.FAILED, State.TIMEOUT])
def test_retry_reopens_an_ended_task_with_its_attempts_reset_and_records_who(engine, state):
    task, _ = in_state(engine, state)
    engine.retry(task.id, by="alice")
    got = engine.get(task.id)
    assert (got.status, got.attempt, got.error_kind, got.reason, got.finished_at) == (State.PENDING, 0, "", "", None)
    assert raw_task(engine, task.id)["retried_by"] == "alice"
    event = engine.history(task.id)[-1]
    assert (event.verb, event.from_, event.to, event.by, event.reason, event.attempt) == (
        "retry",
        state,
        "PENDING",
        "alice",
        "manual retry by alice",
        1,
    )
    lease = engine.claim(task.id, "w2")
    assert (lease.attempt, lease.token) == (1, 2)  # a fresh first attempt, a higher token
    assert engine.check() == []


def test_retry_with_an_executor_dispatches_the_task(engine):
    executor = FakeDispatcher()
    engine = sibling(engine, dispatcher=executor)
    task = submitted(engine)
    engine.fail(engine.claim(task.id, "w1"), "boom", retryable=False)
    engine.retry(task.id, by="alice")
    assert engine.get(task.id).status == State.QUEUED and len(executor.dispatches(task.id)) == 2
    assert engine.check() == []


def test_resent_retry_with_the_same_retry_id_is_replayed_and_changes_nothing(engine):
    task, _ = in_state(engine, State.FAILED)
    keys, argv = engine.keys.task(task.id), ["alice", "0", "retry-1"]
    assert engine.scripts._call("retry", keys, argv)[0] == Code.OK
    before = snapshot(engine, task.id)
    assert engine.scripts._call("retry", keys, argv) == [Code.REPLAYED, engine.get(task.id).version]
    assert snapshot(engine, task.id) == before


def test_retry_of_another_owners_task_is_task_not_found_and_admin_may_retry_it(engine):
    task, _ = in_state(engine, State.FAILED)
    before = snapshot(engine, task.id)
    with pytest.raises(TaskNotFound):
        engine.retry(task.id, by="mallory")
    assert snapshot(engine, task.id) == before
    engine.retry(task.id, by="root", admin=True)
    assert engine.get(task.id).status == State.PENDING
    assert engine.history(task.id)[-1].by == "root"


def test_retry_of_a_task_that_does_not_exist_is_task_not_found(engine):
    with pytest.raises(TaskNotFound):
        engine.retry(GHOST, by="alice", admin=True)
    assert engine.redis.keys(f"*{GHOST}*") == []


@pytest.mark.parametrize("state", [State.PENDING, State.PROCESSING, State.SUCCESS, State.CANCELLED])
def test_retry_of_a_task_that_has_not_failed_is_an_illegal_transition(engine, state):
    task, _ = in_state(engine, state)
    before = snapshot(engine, task.id)
    with pytest.raises(IllegalTransition) as err:
        engine.retry(task.id, by="alice")
    assert (err.value.task_id, err.value.state, err.value.verb) == (task.id, state, "retry")
    assert snapshot(engine, task.id) == before


def test_holder_of_a_failed_attempt_cannot_act_after_a_manual_retry(engine):
    task, lease = in_state(engine, State.FAILED)
    engine.retry(task.id, by="alice")
    with pytest.raises(LeaseLost):
        engine.complete(lease, {"late": True})
    assert engine.get(task.id).status == State.PENDING


@pytest.mark.parametrize("verb", ["cancel", "edit"])
def test_a_task_cancelled_while_waiting_to_retry_reports_no_next_retry(engine, verb):
    task, _ = in_state(engine, State.RETRY_WAITING)
    if verb == "cancel":
        engine.cancel(task.id, by="alice")
    else:
        engine.edit(task.id, {"prompt": "a dog"}, by="alice")
    got = engine.get(task.id)
    assert (got.status, got.next_retry_at) == (State.CANCELLED, None)


def test_an_edit_keeps_the_requests_delay(engine):
    executor = FakeDispatcher()
    e = sibling(engine, dispatcher=executor)
    old = e.submit("render", {"prompt": "a"}, owner="alice", delay=3600)
    new = e.edit(old.id, {"prompt": "b"}, by="alice")
    assert (new.status, executor.dispatches(new.id)) == (State.PENDING, [])
    due = e.redis.zscore(e.keys.task(new.id).dispatch, new.id) / 1000
    assert due - old.created_at >= 3600 - 1  # the request's time, not a new delay from the edit
    assert e.check() == []
