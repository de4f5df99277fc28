"""Scripts survive losing the server's Lua: FUNCTION FLUSH and SCRIPT FLUSH, and a Redis restart.

engine/core/functions.py sends each script as a function (FCALL) and loads it where the server
lacks it (one call at a time and in the sweeper's pipelines). The flushes run on both backends
(fakeredis supports them); the restart needs a real redis-server we own, with an fsync'd AOF so
nothing is lost: the functions are part of the data it keeps.
"""

import fakeredis
import pytest

from ghostless import Engine, State
from tests.conftest import register_test_types
from tests.support.lua import forget_lua, function_loaded, loaded, script_cached
from tests.support.wait import wait_for_server_time


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
        forget_lua(engine.redis)
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
        assert function_loaded(engine.redis, "submit")  # kept in the AOF: nothing to load again
        assert not script_cached(engine.redis, "submit")
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


def test_every_call_works_on_a_server_without_functions():
    """Redis 6.2 answers FCALL with "unknown command": every script goes by EVALSHA instead."""
    client = fakeredis.FakeRedis(version=(6, 2))
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    task_id = lifecycle(engine, lambda: None)
    got = engine.get(task_id)
    assert (got.status, got.attempt, got.result) == (State.SUCCESS, 2, {"url": "s3://cat.png"})
    assert script_cached(client, "claim") and script_cached(client, "promote")
    assert engine.check() == []


def test_a_function_redis_cannot_load_goes_by_evalsha(private_redis):
    """FUNCTION LOAD is refused at maxmemory (SCRIPT LOAD is not): a read still answers."""
    server = private_redis()
    client = server.client()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    forget_lua(client)
    client.config_set("maxmemory", 1)
    try:
        assert engine.get(task.id).status == State.PENDING
        assert not function_loaded(client, "read") and script_cached(client, "read")
    finally:
        client.config_set("maxmemory", 0)
    assert engine.get(task.id).status == State.PENDING  # and it goes on by EVALSHA in this process
