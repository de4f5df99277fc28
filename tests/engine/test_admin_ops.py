"""Manual operations for admins: reclaim a stuck task now, retry every FAILED of a type, drain a queue."""

import pytest

from ghostless import IllegalTransition, LeaseLost, State
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import sibling


def test_reclaiming_a_stuck_task_takes_it_from_its_worker_and_runs_it_again(engine):
    task = engine.submit("render", {}, owner="alice")
    stuck = engine.claim(task.id, "w1")  # a 30 s lease: the sweeper would wait
    assert engine.reclaim(task.id, by="root") == State.PENDING  # retried at once
    got = engine.get(task.id)
    assert (got.attempt, got.reason) == (1, "reclaimed by root")
    with pytest.raises(LeaseLost):
        engine.complete(stuck, {})  # the old worker can no longer report
    moves = [e.to for e in engine.history(task.id) if e.kind == "transition"]
    assert moves[-3:] == ["TIMEOUT", "RETRY_WAITING", "PENDING"]
    assert engine.check() == []


def test_reclaiming_a_task_that_is_not_running_is_illegal(engine):
    task = engine.submit("render", {}, owner="alice")
    with pytest.raises(IllegalTransition):
        engine.reclaim(task.id, by="root")


def test_retry_failed_reopens_every_failed_task_of_the_type_only(engine):
    failed = []
    for i in range(3):
        task = engine.submit("render", {"i": i}, owner=f"user{i}")
        engine.fail(engine.claim(task.id, "w1"), "bad_prompt", "no", retryable=False)
        failed.append(task.id)
    ok = engine.submit("render", {}, owner="alice")
    engine.complete(engine.claim(ok.id, "w1"), {})
    assert engine.retry_failed("render", by="root") == 3
    assert {engine.get(t).status for t in failed} == {State.PENDING}
    assert engine.get(ok.id).status == State.SUCCESS
    assert all(engine.history(t)[-1].by == "root" for t in failed)


def test_a_draining_queue_dispatches_nothing_until_resumed(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)
    dispatching.drain("images")
    assert dispatching.draining() == ["images"]
    task = dispatching.submit("render", {}, owner="alice")
    assert dispatching.get(task.id).status == State.PENDING and executor.enqueued == []
    dispatching.drain("images", False)
    dispatching.dispatch(task.id)
    assert dispatching.get(task.id).status == State.QUEUED and len(executor.enqueued) == 1


def test_the_dispatch_script_itself_refuses_while_the_queue_drains(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)
    fresh = engine.submit("render", {}, owner="alice")  # PENDING: that engine has no executor
    dispatching.drain("images")
    assert dispatching.dispatch(fresh.id) is None  # one script call: refused, nothing made
    assert dispatching.get(fresh.id).status == State.PENDING and executor.dispatches(fresh.id) == []
