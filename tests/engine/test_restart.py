"""Scripts survive losing the server's script cache: SCRIPT FLUSH, and a Redis restart.

redis-py's Script runs EVALSHA and reloads on NOSCRIPT (one call at a time and in the
sweeper's pipelines). SCRIPT FLUSH runs on both backends (fakeredis supports it); the
restart needs a real redis-server we own, with an fsync'd AOF so nothing is lost.
"""

import hashlib

import pytest

from ghostless import Engine, State
from ghostless.core.lua_source import source
from tests.conftest import register_test_types
from tests.support.wait import wait_for_server_time


def loaded(engine, name: str) -> bool:
    return engine.redis.script_exists(hashlib.sha1(source(name).encode()).hexdigest())[0]


def lifecycle(engine, between):
    """A task through submit, claim, every holder call, a failure, its retry, a second claim
    and completion, calling ``between()`` before each step. Returns the task id."""
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    between()
    lease = engine.claim(task.id, "w1")
    between()
    assert engine.heartbeat(lease) > 0
    between()
    engine.stage(lease, "generating")
    between()
    engine.progress(lease, 0.5, "half")
    between()
    engine.checkpoint(lease, "page", 2)
    between()
    assert engine.fail(lease, "boom") == State.RETRY_WAITING
    between()
    wait_for_server_time(engine.redis, engine.get(task.id).next_retry_at * 1000)
    assert engine.sweep().promoted == 1  # the sweeper's scripts run in a pipeline
    between()
    lease = engine.claim(task.id, "w2")
    between()
    assert engine.complete(lease, {"url": "s3://cat.png"}) == State.SUCCESS
    between()
    return task.id


def test_every_call_works_after_script_flush(engine):
    flushes = []

    def flush():
        engine.redis.script_flush()
        assert not loaded(engine, "claim") and not loaded(engine, "expire")
        flushes.append(1)

    task_id = lifecycle(engine, flush)
    got = engine.get(task_id)
    assert (got.status, got.attempt, got.result) == (State.SUCCESS, 2, {"url": "s3://cat.png"})
    assert engine.checkpoints(task_id) == {"page": 2}
    assert len(flushes) == 10
    assert engine.check() == []


@pytest.mark.slow
def test_every_call_works_across_redis_restarts_and_nothing_is_lost(private_redis):
    server = private_redis(appendonly=True, appendfsync="always")
    engine = register_test_types(Engine(server.client(), namespace="t", dispatcher=None))
    restarts = []

    def restart():
        server.restart()  # SIGKILL: whatever the AOF holds is what survives
        assert not loaded(engine, "claim")
        restarts.append(1)

    task_id = lifecycle(engine, restart)
    got = engine.get(task_id)
    assert (got.status, got.attempt, got.result) == (State.SUCCESS, 2, {"url": "s3://cat.png"})
    assert engine.checkpoints(task_id) == {"page": 2}
    assert [e.verb for e in engine.history(task_id) if e.kind == "transition"] == [
        "submit",
        "claim",
        "fail",
        "promote",
        "claim",
        "complete",
    ]
    assert engine.stats()["images"]["counts"]["SUCCESS"] == 1
    assert len(restarts) == 10
    assert engine.check() == []
