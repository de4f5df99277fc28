"""AsyncEngine.wait / AsyncEngine.result: the Engine's wait, awaited: blocked in XREAD on the task's
queue stream on the async client, so many waiters share one event loop (no thread each)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ghostless import State, TaskFailed, TaskNotFound, WaitTimeout
from ghostless.core import waiting
from ghostless.core.steps import Events, ReadTasks
from tests.support.aio import run_async


@pytest.fixture
def no_polling(monkeypatch):
    """Blocks of 60 s: a waiter can only wake up (within the tests' 20 s) for an event."""
    monkeypatch.setattr(waiting, "MAX_BLOCK", 60.0)
    monkeypatch.setattr(waiting, "_socket_timeout", lambda client: 200.0)


class Steps(list):
    """The steps the AsyncEngine's calls take, in order; ``blocked(n)`` returns once waiters have
    gone to the stream's events ``n`` times (they block on its reader)."""

    def __init__(self, aengine, monkeypatch):
        super().__init__()
        self.reads, self.sent, do = 0, asyncio.Condition(), aengine._do

        async def spy(step):
            self.append(step)
            if isinstance(step, Events):
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
        await steps.blocked()  # the waiter waits on the stream (for 60 s): only an event can wake it
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
        await steps.blocked(len(tasks))  # every waiter on the stream
        during = threading.active_count()
        for i, task in enumerate(tasks):
            await asyncio.to_thread(lambda t=task, n=i: engine.complete(engine.claim(t.id, "w"), n))
        return await asyncio.wait_for(asyncio.gather(*waiters), 20), during

    results, during = run_async(engine, body)
    assert results == list(range(20))
    assert during - threads_before < 5  # not one per waiter


def test_more_waiters_than_the_pool_has_connections_share_one_reader(engine, no_polling, monkeypatch):
    """redis.asyncio's pool holds 100 connections: 150 waiters each blocked in its own XREAD would
    not fit (MaxConnectionsError), nor leave one for other calls."""
    tasks = [engine.submit("render", {"n": i}, owner="alice") for i in range(150)]

    def work():
        for i, task in enumerate(tasks):
            engine.complete(engine.claim(task.id, "w"), i)

    async def body(aengine):
        steps = Steps(aengine, monkeypatch)
        blocked, real_xread = {"now": 0, "most": 0}, aengine.redis.xread

        async def xread(*args, **kwargs):  # XREADs in flight: connections held by waiting
            blocked["now"] += 1
            blocked["most"] = max(blocked["most"], blocked["now"])
            try:
                return await real_xread(*args, **kwargs)
            finally:
                blocked["now"] -= 1

        monkeypatch.setattr(aengine.redis, "xread", xread)
        waiters = []
        for start in range(0, len(tasks), 50):  # 50 at a time: their first reads take a connection each
            waiters += [asyncio.create_task(aengine.result(t.id, timeout=60)) for t in tasks[start : start + 50]]
            await steps.blocked(len(waiters))
        await asyncio.to_thread(work)  # 150 waiting at once
        return await asyncio.wait_for(asyncio.gather(*waiters), 30), blocked["most"]

    results, most_blocked = run_async(engine, body)
    assert results == list(range(150))
    assert most_blocked == 1  # one reader for the queue's stream, not one XREAD per waiter


def test_a_readers_error_is_raised_in_its_waiters_and_the_next_wait_reads_again(engine, no_polling, monkeypatch):
    import redis

    task = engine.submit("render", {}, owner="alice")

    async def body(aengine):
        real_xread = aengine.redis.xread

        async def down(*args, **kwargs):
            raise redis.ConnectionError("Redis went away")

        monkeypatch.setattr(aengine.redis, "xread", down)
        with pytest.raises(redis.ConnectionError, match="went away"):
            await aengine.wait(task.id, timeout=30)
        monkeypatch.setattr(aengine.redis, "xread", real_xread)
        steps = Steps(aengine, monkeypatch)
        waiter = asyncio.create_task(aengine.result(task.id, timeout=30))
        await steps.blocked()
        await asyncio.to_thread(lambda: engine.complete(engine.claim(task.id, "w1"), "done"))
        return await asyncio.wait_for(waiter, 20)

    assert run_async(engine, body) == "done"
