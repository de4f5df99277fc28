"""claim.lua: a worker takes a task's lease for a new attempt. One test per return code, then the rest."""

import re

import pytest

from ghostless import Code, IllegalTransition, State, TaskNotFound, UnknownTaskType, WrongDispatch
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import raw_task, sibling, snapshot
from tests.support.wait import wait_for_server_time


def test_claim_of_a_pending_task_starts_attempt_one_under_token_one(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    assert (
        lease.task_id,
        lease.token,
        lease.attempt,
        lease.args,
        lease.type,
        lease.worker,
        lease.lease,
        lease.max_attempts,
    ) == (task.id, 1, 1, {"prompt": "a cat"}, "render", "w1", 30.0, 3)
    got = engine.get(task.id)
    assert (got.status, got.worker, got.token, got.attempt, got.version) == (State.PROCESSING, "w1", 1, 1, 2)
    h = raw_task(engine, task.id)
    assert int(h["lease_until"]) - int(h["started_at"]) == 30_000
    assert int(h["attempt_deadline"]) - int(h["started_at"]) == 600_000
    k = engine.keys.task(task.id)
    assert engine.redis.zscore(k.leases, task.id) == int(h["lease_until"]) == got.lease_deadline * 1000
    # a claim id made for the call: 16 hex digits (engine/core/ids.py), stored for the lease's checks
    assert h["claim_id"] == lease.claim_id and re.fullmatch(r"[0-9a-f]{16}", lease.claim_id)
    assert engine.redis.zscore(k.dispatch, task.id) is None
    event = engine.history(task.id)[-1]
    assert (event.verb, event.from_, event.to, event.worker, event.attempt) == (
        "claim",
        "PENDING",
        "PROCESSING",
        "w1",
        1,
    )
    assert engine.check() == []


def test_resent_claim_with_the_same_claim_id_returns_the_same_lease_again(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    first = engine.claim(task.id, "w1", claim_id="c-1")
    before = snapshot(engine, task.id)
    again = engine.claim(task.id, "w1", claim_id="c-1")
    assert again == first
    assert snapshot(engine, task.id) == before
    reply = engine.scripts._call("claim", engine.keys.task(task.id), ["w1", "c-1", "", ",render,"])
    assert reply[0] == Code.REPLAYED and reply[1:3] == [1, 1]


def test_claim_of_a_task_that_does_not_exist_is_task_not_found(engine):
    with pytest.raises(TaskNotFound) as err:
        engine.claim("images.0123456789abcdef0123", "w1")
    assert err.value.task_id == "images.0123456789abcdef0123"
    assert engine.redis.keys("*task:images.0123456789abcdef0123*") == []


@pytest.mark.parametrize("state", [State.PROCESSING, State.SUCCESS, State.CANCELLED])
def test_claim_of_a_task_not_pending_or_queued_is_an_illegal_transition(engine, state):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    if state == State.SUCCESS:
        engine.complete(lease, {})
    elif state == State.CANCELLED:
        engine.cancel(task.id, by="alice")
    before = snapshot(engine, task.id)
    with pytest.raises(IllegalTransition) as err:
        engine.claim(task.id, "w2")
    assert (err.value.task_id, err.value.state, err.value.verb) == (task.id, state, "claim")
    assert snapshot(engine, task.id) == before


def test_delivery_of_a_dispatch_that_is_no_longer_current_is_a_wrong_dispatch(engine):
    executor = FakeDispatcher()
    engine = sibling(engine, dispatcher=executor)
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    old = executor.dispatches(task.id)[0]
    new = engine.dispatch(task.id)  # the sweeper's re-dispatch of a job it believed lost
    before = snapshot(engine, task.id)
    with pytest.raises(WrongDispatch) as err:
        engine.claim(task.id, "w1", dispatch_id=old)
    assert (err.value.task_id, err.value.dispatch_id) == (task.id, old)
    assert snapshot(engine, task.id) == before
    lease = engine.claim(task.id, "w2", dispatch_id=new)
    assert (lease.token, engine.get(task.id).status) == (1, State.PROCESSING)
    assert engine.check() == []


def test_claim_by_an_engine_that_does_not_run_the_type_is_unknown_type(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    other = sibling(engine, types=False)
    other.task(name="brief", queue="other")(lambda ctx, **kw: None)
    before = snapshot(engine, task.id)
    with pytest.raises(UnknownTaskType) as err:
        other.claim(task.id, "w1")
    assert err.value.name == "render"
    assert snapshot(engine, task.id) == before


def test_claim_of_a_queued_task_with_its_current_dispatch_id_succeeds(engine):
    executor = FakeDispatcher()
    engine = sibling(engine, dispatcher=executor)
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    assert engine.get(task.id).status == State.QUEUED
    lease = engine.claim(task.id, "w1", dispatch_id=executor.dispatches(task.id)[-1])
    assert lease.attempt == 1
    assert "dispatch_id" not in raw_task(engine, task.id)  # a second delivery of that job is refused
    assert engine.check() == []


def test_each_claim_takes_a_higher_token_and_counts_an_attempt(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    first = engine.claim(task.id, "w1")
    engine.release(first)  # gives the attempt back
    second = engine.claim(task.id, "w2")
    assert (second.token, second.attempt) == (2, 1)
    assert engine.fail(second, "boom") == State.RETRY_WAITING
    wait_for_server_time(engine.redis, engine.get(task.id).next_retry_at * 1000)
    assert engine.sweep().promoted == 1
    third = engine.claim(task.id, "w3")
    assert (third.token, third.attempt) == (3, 2)
    assert engine.check() == []


def test_a_task_submitted_with_a_delay_cannot_be_claimed_or_dispatched_before_it(engine):
    task = engine.submit("render", {}, owner="alice", delay=1.0)  # longer than a loaded host's pause
    with pytest.raises(IllegalTransition, match="delayed"):
        engine.claim(task.id, "w1")
    executor = FakeDispatcher()
    e = sibling(engine, dispatcher=executor)
    assert e.dispatch(task.id) is None and executor.dispatches(task.id) == []
    wait_for_server_time(engine.redis, engine.redis.zscore(engine.keys.task(task.id).dispatch, task.id))
    assert engine.claim(task.id, "w1").attempt == 1  # once its delay has passed
    assert engine.check() == []
