"""Engine.wait / Engine.result: waiting for a task's end on its queue's event stream (RQ's
latest_result(timeout=), Celery's AsyncResult.get(timeout=), BullMQ's waitUntilFinished)."""

from __future__ import annotations

import threading

import pytest

from ghostless import State, TaskFailed, TaskNotFound, WaitTimeout
from ghostless.core import waiting
from ghostless.core.steps import ReadTasks


class Waiter(threading.Thread):
    """``engine.<method>(*args, **kw)`` in a thread; ``outcome`` is its return or its exception."""

    def __init__(self, call, *args, **kw):
        super().__init__(daemon=True)
        self.call, self.args, self.kw, self.outcome = call, args, kw, None

    def run(self):
        try:
            self.outcome = self.call(*self.args, **self.kw)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            self.outcome = e

    def joined(self, timeout: float = 20.0):
        self.join(timeout)
        assert not self.is_alive(), "the waiter did not return"
        return self.outcome


@pytest.fixture
def no_polling(monkeypatch):
    """Blocks of 60 s: a waiter can only wake up (within the tests' 20 s) for an event."""
    monkeypatch.setattr(waiting, "MAX_BLOCK", 60.0)
    monkeypatch.setattr(waiting, "_socket_timeout", lambda client: 200.0)


def test_an_ended_task_is_returned_at_once_and_its_result_read(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    engine.complete(engine.claim(task.id, "w1"), {"url": "s3://cat.png"})
    assert engine.wait(task.id, timeout=0).status == State.SUCCESS
    assert engine.result(task.id, timeout=0) == {"url": "s3://cat.png"}


def test_the_wait_ends_on_the_tasks_terminal_event_not_by_polling(engine, no_polling, monkeypatch):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    other = engine.submit("render", {"prompt": "a dog"}, owner="bob")
    reads = []  # the task reads the wait makes (engine/core/steps.py ReadTasks)
    real_do = engine._do
    monkeypatch.setattr(
        engine, "_do", lambda step: (isinstance(step, ReadTasks) and reads.append(step)) or real_do(step)
    )
    waiter = Waiter(engine.result, task.id, timeout=30)
    waiter.start()
    lease = engine.claim(task.id, "w1")
    engine.stage(lease, "uploading")  # events of the task that do not end it
    engine.complete(engine.claim(other.id, "w2"), {"url": "dog"})  # another task's end
    engine.complete(lease, {"url": "cat"})
    assert waiter.joined() == {"url": "cat"}
    assert 2 <= len(reads) <= 3  # before and after noting the stream, and once at its end


@pytest.mark.parametrize("how", ["fail", "cancel"])
def test_result_raises_the_tasks_failure_with_its_reason(engine, no_polling, how):
    task = engine.submit("render", {}, owner="alice")
    waiter = Waiter(engine.result, task.id, timeout=30)
    waiter.start()
    if how == "fail":
        engine.fail(engine.claim(task.id, "w1"), "quota", "the model refused", retryable=False)
    else:
        engine.cancel(task.id, by="alice", reason="left the page")
    error = waiter.joined()
    assert isinstance(error, TaskFailed), error
    assert error.task_id == task.id and error.status == (State.FAILED if how == "fail" else State.CANCELLED)
    if how == "fail":
        assert (error.error_kind, error.reason) == ("quota", "the model refused")
        assert "FAILED [quota]: the model refused" in str(error)
    else:
        assert "left the page" in error.reason
    assert engine.wait(task.id, timeout=0).status == error.status  # wait returns it, result raises


def test_a_retried_attempt_is_not_the_end(engine, no_polling):
    task = engine.submit("render", {}, owner="alice")
    waiter = Waiter(engine.wait, task.id, timeout=30)
    waiter.start()
    engine.fail(engine.claim(task.id, "w1"), "flaky", "try again", retryable=True)  # -> RETRY_WAITING
    assert engine.get(task.id).status == State.RETRY_WAITING
    engine.cancel(task.id, by="alice")
    assert waiter.joined().status == State.CANCELLED


def test_a_timeout_raises_with_the_unfinished_task_which_goes_on(engine):
    task = engine.submit("render", {}, owner="alice")
    with pytest.raises(WaitTimeout) as caught:
        engine.wait(task.id, timeout=0.2)
    assert isinstance(caught.value, TimeoutError) and caught.value.task.status == State.PENDING
    assert "had not ended after 0.2 s (still PENDING)" in str(caught.value)
    with pytest.raises(WaitTimeout):
        engine.result(task.id, timeout=0)
    engine.complete(engine.claim(task.id, "w1"), 7)
    assert engine.result(task.id, timeout=5) == 7


def test_another_owners_task_an_unknown_and_a_malformed_id_are_not_found(engine):
    task = engine.submit("render", {}, owner="alice")
    for task_id, owner in ((task.id, "mallory"), ("images.0123456789abcdef0123", None), ("../../etc", None)):
        with pytest.raises(TaskNotFound):
            engine.wait(task_id, timeout=1, owner=owner)
    with pytest.raises(ValueError, match="timeout"):
        engine.wait(task.id, timeout=-1)


def test_a_task_purged_while_waited_on_is_not_found(engine, monkeypatch):
    monkeypatch.setattr(waiting, "MAX_BLOCK", 0.05)  # the look now and then finds it gone
    task = engine.submit("render", {}, owner="alice")
    waiter = Waiter(engine.wait, task.id, timeout=30)
    waiter.start()
    engine.redis.delete(engine.keys.task(task.id).task)
    assert isinstance(waiter.joined(), TaskNotFound)
