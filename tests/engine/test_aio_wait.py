"""AsyncEngine.wait / AsyncEngine.result: the Engine's wait, awaited: blocked in XREAD on the task's
queue stream on the async client, so many waiters share one event loop (no thread each)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ghostless import State, TaskFailed, TaskNotFound, WaitTimeout
from ghostless.core import waiting
from ghostless.core.steps import Command, ReadTasks
from tests.support.aio import run_async


@pytest.fixture
def no_polling(monkeypatch):
    """Blocks of 60 s: a waiter can only wake up (within the tests' 20 s) for an event."""
    monkeypatch.setattr(waiting, "MAX_BLOCK", 60.0)
    monkeypatch.setattr(waiting, "_socket_timeout", lambda client: 200.0)


class Steps(list):
    """The steps the AsyncEngine's calls take, in order; ``blocked(n)`` returns once ``n`` XREADs
    have been sent (the waiters block on the stream)."""

    def __init__(self, aengine, monkeypatch):
        super().__init__()
        self.reads, self.sent, do = 0, asyncio.Condition(), aengine._do

        async def spy(step):
            self.append(step)
            if isinstance(step, Command) and step.name == "xread":
                async with self.sent:
                    self.reads += 1
                    self.sent.notify_all()
            return await do(step)

        monkeypatch.setattr(aengine, "_do", spy)

    async def blocked(self, n: int = 1) -> None:
        async with self.sent:
            await asyncio.wait_for(self.sent.wait_for(lambda: self.reads >= n), 20)


def test_the_wait_ends_on_the_tasks_terminal_event_not_by_polling(engine, no_polling, monkeypatch):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    other = engine.submit("render", {"prompt": "a dog"}, owner="bob")

    def work():  # a worker, elsewhere
        lease = engine.claim(task.id, "w1")
        engine.stage(lease, "uploading")  # events of the task that do not end it
        engine.complete(engine.claim(other.id, "w2"), {"url": "dog"})  # another task's end
        engine.complete(lease, {"url": "cat"})

    async def body(aengine):
        steps = Steps(aengine, monkeypatch)
        waiter = asyncio.create_task(aengine.result(task.id, timeout=30))
        await steps.blocked()  # the waiter is in XREAD (for 60 s): only an event can wake it
        await asyncio.to_thread(work)
        return await asyncio.wait_for(waiter, 20), steps

    result, steps = run_async(engine, body)
    assert result == {"url": "cat"}
    assert sum(isinstance(s, ReadTasks) for s in steps) == 3  # before and after noting the stream, once at its end


@pytest.mark.parametrize("how", ["fail", "cancel"])
def test_result_raises_the_tasks_failure_with_its_reason(engine, no_polling, how):
    task = engine.submit("render", {}, owner="alice")

    def end():
        if how == "fail":
            engine.fail(engine.claim(task.id, "w1"), "quota", "the model refused", retryable=False)
        else:
            engine.cancel(task.id, by="alice", reason="left the page")

    async def body(aengine):
        waiter = asyncio.create_task(aengine.result(task.id, timeout=30))
        await asyncio.to_thread(end)
        with pytest.raises(TaskFailed) as failed:
            await asyncio.wait_for(waiter, 20)
        return failed.value, await aengine.wait(task.id, timeout=0)

    error, ended = run_async(engine, body)
    assert error.task_id == task.id and error.status == (State.FAILED if how == "fail" else State.CANCELLED)
    if how == "fail":
        assert (error.error_kind, error.reason) == ("quota", "the model refused")
    else:
        assert "left the page" in error.reason
    assert ended.status == error.status and ended == engine.wait(task.id, timeout=0)


def test_a_timeout_raises_with_the_unfinished_task_and_not_found_is_typed(engine):
    task = engine.submit("render", {}, owner="alice")

    async def body(aengine):
        with pytest.raises(WaitTimeout) as late:
            await aengine.wait(task.id, timeout=0.2)
        with pytest.raises(WaitTimeout):
            await aengine.result(task.id, timeout=0)
        for task_id, owner in ((task.id, "mallory"), ("images.0123456789abcdef0123", None), ("../../etc", None)):
            with pytest.raises(TaskNotFound):
                await aengine.wait(task_id, timeout=1, owner=owner)
        with pytest.raises(ValueError, match="timeout"):
            await aengine.wait(task.id, timeout=-1)
        return late.value

    late = run_async(engine, body)
    assert isinstance(late, TimeoutError) and late.task.status == State.PENDING
    assert engine.get(task.id).status == State.PENDING  # it goes on


def test_many_waiters_share_the_loop_without_a_thread_each(engine, no_polling, monkeypatch):
    tasks = [engine.submit("render", {"n": i}, owner="alice") for i in range(20)]
    threads_before = threading.active_count()

    async def body(aengine):
        steps = Steps(aengine, monkeypatch)
        waiters = [asyncio.create_task(aengine.result(t.id, timeout=30)) for t in tasks]
        await steps.blocked(len(tasks))  # every waiter in XREAD
        during = threading.active_count()
        for i, task in enumerate(tasks):
            await asyncio.to_thread(lambda t=task, n=i: engine.complete(engine.claim(t.id, "w"), n))
        return await asyncio.wait_for(asyncio.gather(*waiters), 20), during

    results, during = run_async(engine, body)
    assert results == list(range(20))
    assert during - threads_before < 5  # not one per waiter
