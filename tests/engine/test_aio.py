"""AsyncEngine: the Engine's client calls awaited on redis.asyncio (FastAPI, aiohttp), on fakeredis,
a real redis-server and a real Redis Cluster. The same calls, the same answers and errors, the
same task as the Engine sees it."""

from __future__ import annotations

import pytest

from ghostless import (
    AsyncEngine,
    BadArgs,
    IdempotencyConflict,
    IllegalTransition,
    Quota,
    QuotaExceeded,
    State,
    TaskNotFound,
    UnknownTaskType,
)
from tests.support.aio import async_client_like, run_async
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import sibling


@pytest.fixture
def typed(engine):
    """The test engine with a strict signature and an internal type."""

    @engine.task(name="strict", queue="images")
    def strict(ctx, prompt, size=512):  # pragma: no cover - never run here
        return None

    @engine.task(name="secret", queue="images", internal=True)
    def secret(ctx):  # pragma: no cover
        return None

    return engine


def test_a_task_submitted_async_is_the_task_the_engine_sees(engine):
    async def body(aengine):
        task = await aengine.submit("render", {"prompt": "a cat"}, owner="alice", priority=3)
        return task, await aengine.get(task.id), await aengine.history(task.id)

    submitted, read, history = run_async(engine, body)
    assert submitted.status == State.PENDING and submitted.args == {"prompt": "a cat"} and submitted.priority == 3
    assert read == engine.get(submitted.id)
    assert history == engine.history(submitted.id) and [e.to for e in history] == ["PENDING"]


def test_a_task_the_engine_runs_is_read_alike_by_both(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.progress(lease, 0.5, "half")

    async def body(aengine):
        return await aengine.get_many([task.id, "images.0123456789abcdef0123", "../x"]), await aengine.history(task.id)

    (read, missing, malformed), history = run_async(engine, body)
    assert read == engine.get(task.id) and read.status == State.PROCESSING and read.progress == 0.5
    assert missing is None and malformed is None
    assert history == engine.history(task.id)


def test_get_many_keeps_the_order_across_queues_and_hides_other_owners_tasks(engine):
    mine = engine.submit("render", {}, owner="alice")
    other_queue = engine.submit("brief", {}, owner="alice")
    theirs = engine.submit("render", {}, owner="bob")
    ids = [other_queue.id, theirs.id, mine.id]

    async def body(aengine):
        return await aengine.get_many(ids, owner="alice"), await aengine.get(theirs.id, owner="alice")

    (first, hidden, last), alone = run_async(engine, body)
    assert (first.id, hidden, last.id, alone) == (other_queue.id, None, mine.id, None)
    assert [first, hidden, last] == engine.get_many(ids, owner="alice")


def test_an_idempotency_key_replays_the_task_and_other_args_conflict(engine):
    async def body(aengine):
        first = await aengine.submit("render", {"prompt": "p"}, owner="alice", idempotency_key="k1")
        again = await aengine.submit("render", {"prompt": "p"}, owner="alice", idempotency_key="k1")
        with pytest.raises(IdempotencyConflict):
            await aengine.submit("render", {"prompt": "other"}, owner="alice", idempotency_key="k1")
        return first, again

    first, again = run_async(engine, body)
    assert again.id == first.id and again.replayed and not first.replayed
    assert engine.submit("render", {"prompt": "p"}, owner="alice", idempotency_key="k1").id == first.id


def test_a_quota_is_enforced_on_async_submits(engine):
    async def body(aengine):
        await aengine.submit("render", {}, owner="alice", quota=Quota(max_unfinished=1))
        with pytest.raises(QuotaExceeded) as refused:
            await aengine.submit("render", {}, owner="alice", quota=Quota(max_unfinished=1))
        return refused.value

    refused = run_async(engine, body)
    assert (refused.owner, refused.limit) == ("alice", "max_unfinished")


def test_bad_submits_raise_the_engines_typed_errors(typed):
    async def body(aengine):
        with pytest.raises(UnknownTaskType):
            await aengine.submit("nope", {}, owner="alice")
        with pytest.raises(UnknownTaskType):
            await aengine.submit("secret", {}, owner="alice")  # internal: engine code only
        with pytest.raises(BadArgs, match="prompt"):
            await aengine.submit("strict", {"size": 3}, owner="alice")
        with pytest.raises(BadArgs, match="colour"):
            await aengine.submit("strict", {"prompt": "p", "colour": "red"}, owner="alice")
        with pytest.raises(ValueError, match="owner"):
            await aengine.submit("render", {}, owner="")
        with pytest.raises(ValueError, match="args"):
            await aengine.submit("render", ["not", "a", "dict"], owner="alice")
        return await aengine.submit("strict", {"prompt": "p"}, owner="alice")

    assert run_async(typed, body).args == {"prompt": "p"}
    assert typed.list_tasks("alice")[0] == [typed.get(typed.list_tasks("alice")[0][0].id)]  # nothing else written


def test_cancel_edit_and_retry_by_the_owner(engine):
    task = engine.submit("render", {"prompt": "a"}, owner="alice")
    failed = engine.submit("render", {"prompt": "b"}, owner="alice")
    engine.fail(engine.claim(failed.id, "w1"), "bad_prompt", "refused")  # permanent: FAILED

    async def body(aengine):
        new = await aengine.edit(task.id, {"prompt": "a2"}, by="alice")
        await aengine.cancel(new.id, by="alice", reason="left the page")
        await aengine.cancel(new.id, by="alice")  # cancelling a cancelled task: a no-op
        await aengine.retry(failed.id, by="alice")
        return new

    new = run_async(engine, body)
    old = engine.get(task.id)
    assert old.status == State.CANCELLED and old.superseded_by == new.id and new.supersedes == task.id
    assert new.args == {"prompt": "a2"} and engine.get(new.id).status == State.CANCELLED
    assert engine.get(new.id).reason == "left the page"
    assert engine.get(failed.id).status == State.PENDING and engine.history(failed.id)[-1].verb == "retry"


def test_another_owner_cannot_touch_a_task_but_an_admin_can(engine):
    task = engine.submit("render", {"prompt": "a"}, owner="alice")
    failed = engine.submit("render", {"prompt": "b"}, owner="alice")
    engine.fail(engine.claim(failed.id, "w1"), "bad_prompt", "refused")

    async def body(aengine):
        for call in (
            aengine.cancel(task.id, by="mallory"),
            aengine.edit(task.id, {"prompt": "x"}, by="mallory"),
            aengine.retry(failed.id, by="mallory"),
            aengine.cancel("images.0123456789abcdef0123", by="alice"),
        ):
            with pytest.raises(TaskNotFound):
                await call
        new = await aengine.edit(task.id, {"prompt": "by admin"}, by="root", admin=True)
        await aengine.retry(failed.id, by="root", admin=True)
        await aengine.cancel(new.id, by="root", admin=True)
        with pytest.raises(IllegalTransition):
            await aengine.edit(new.id, {"prompt": "too late"}, by="alice")
        return new

    new = run_async(engine, body)
    assert engine.get(new.id).status == State.CANCELLED and engine.get(new.id).owner == "alice"
    assert engine.get(failed.id).status == State.PENDING
    assert engine.get(task.id).superseded_by == new.id


def test_an_async_submit_dispatches_to_the_executor_as_the_engines_does(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)

    async def body(aengine):
        task = await aengine.submit("render", {"prompt": "a cat"}, owner="alice")
        delayed = await aengine.submit("render", {}, owner="alice", delay=60)
        return task, delayed

    task, delayed = run_async(dispatching, body)
    assert task.status == State.QUEUED and dispatching.get(task.id).status == State.QUEUED
    assert [(t, q) for t, q, _ in executor.enqueued] == [(task.id, "images")]  # the delayed one waits
    assert delayed.status == State.PENDING


def test_an_async_edit_and_retry_dispatch_the_task_they_reopen(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)
    task = dispatching.submit("render", {"prompt": "a"}, owner="alice")
    failed = dispatching.submit("render", {"prompt": "b"}, owner="alice")
    dispatching.fail(dispatching.claim(failed.id, "w1"), "bad_prompt", "refused")
    executor.enqueued.clear()

    async def body(aengine):
        new = await aengine.edit(task.id, {"prompt": "a2"}, by="alice")
        await aengine.retry(failed.id, by="alice")
        return new

    new = run_async(dispatching, body)
    assert [t for t, _, _ in executor.enqueued] == [new.id, failed.id]
    assert new.status == State.QUEUED and dispatching.get(failed.id).status == State.QUEUED


def test_each_async_call_runs_the_engines_own_body():
    """No second copy of the logic: both engines' methods wrap the one body (engine/core/steps.py)."""
    import inspect

    from ghostless import Engine

    calls = ["submit", "get", "get_many", "history", "checkpoints", "list_tasks", "queues", "cancel", "edit"]
    for name in [*calls, "retry", "wait", "result"]:
        assert inspect.unwrap(getattr(AsyncEngine, name)) is inspect.unwrap(getattr(Engine, name)), name
        assert getattr(AsyncEngine, name).__doc__ == getattr(Engine, name).__doc__


def test_cancelling_a_parent_resolves_its_waiting_child_at_once(engine):
    parent = engine.submit("render", {}, owner="alice")
    child = engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    assert child.waiting

    async def body(aengine):
        await aengine.cancel(parent.id, by="alice")
        return await aengine.get(child.id)

    child = run_async(engine, body)
    assert child.status == State.CANCELLED and child.reason.startswith("dependency_failed")


def test_the_async_client_must_be_of_the_engines_kind_of_redis(engine, redis_client):
    with pytest.raises(TypeError, match="Engine"):
        AsyncEngine(async_client_like(redis_client), object())
    if type(redis_client).__name__ == "RedisCluster":
        import redis.asyncio

        with pytest.raises(ValueError, match="cluster"):
            AsyncEngine(redis.asyncio.Redis(), engine)


def test_listing_queues_and_checkpoints_read_alike(engine):
    first = engine.submit("render", {}, owner="alice")
    second = engine.submit("brief", {}, owner="alice")
    engine.submit("render", {}, owner="bob")
    engine.checkpoint(engine.claim(first.id, "w1"), "frames", {"done": 3})

    async def body(aengine):
        page, cursor = await aengine.list_tasks("alice", limit=1)
        rest, end = await aengine.list_tasks("alice", cursor=cursor)
        everyone, _ = await aengine.list_tasks(None, queue="images")
        return page + rest, end, everyone, await aengine.checkpoints(first.id), await aengine.queues()

    alices, end, everyone, checkpoints, queues = run_async(engine, body)
    assert [t.id for t in alices] == [second.id, first.id] and end is None
    assert alices == engine.list_tasks("alice")[0] and everyone == engine.list_tasks(None, queue="images")[0]
    assert checkpoints == {"frames": {"done": 3}} == engine.checkpoints(first.id)
    assert queues == engine.queues() == ["images", "other"]


def test_an_async_submit_takes_the_owners_default_webhook(engine):
    engine.enable_notifications("s" * 32)
    engine.set_webhook("alice", "https://alice.example/hook")

    async def body(aengine):
        default = await aengine.submit("render", {}, owner="alice")
        own = await aengine.submit("render", {}, owner="alice", notify_url="https://other.example/h")
        with pytest.raises(ValueError, match="notify_url"):
            await aengine.submit("render", {}, owner="alice", notify_url="ftp://nope")
        return default, own

    default, own = run_async(engine, body)
    assert default.notify_url == "https://alice.example/hook" == engine.get(default.id).notify_url
    assert own.notify_url == "https://other.example/h"
