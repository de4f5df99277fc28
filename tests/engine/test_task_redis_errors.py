"""An attempt run in this process (engine/execution/runner.py: execute) whose engine calls fail because of
Redis: not the task's fault, so no attempt is consumed; the task's own redis-py errors stay its own."""

import pytest
import redis

from ghostless import State
from ghostless.execution.runner import execute
from tests.support.snapshots import raw_task

STALL = redis.TimeoutError("Timeout reading from socket")


def register_stall_types(engine):
    @engine.task(name="reports", queue="images", lease=30, max_attempts=3, stages={"generating": 0})
    def reports(ctx, verb="progress"):
        {
            "progress": lambda: ctx.progress(0.5, "half way"),
            "stage": lambda: ctx.stage("generating"),
            "checkpoint": lambda: ctx.checkpoint("page", 3),
        }[verb]()
        return {"done": True}

    @engine.task(name="uses_redis", queue="images", lease=30, max_attempts=3)
    def uses_redis(ctx):
        raise redis.TimeoutError("the task's own Redis timed out")

    return engine


def failing(error):
    def call(*args, **kwargs):
        raise error

    return call


@pytest.mark.parametrize("verb", ["progress", "stage", "checkpoint"])
def test_an_engine_call_that_fails_for_redis_reasons_releases_the_attempt_unconsumed(engine, verb):
    register_stall_types(engine)
    task = engine.submit("reports", {"verb": verb}, owner="alice")
    lease = engine.claim(task.id, "w1")
    setattr(engine, verb, failing(STALL))  # as when Redis stalls past the client's timeout

    execute(engine, lease)

    done = engine.get(task.id)
    assert (done.status, done.attempt) == (State.PENDING, 0)  # the next claim is attempt 1 again
    last = engine.history(task.id)[-1]
    assert (last.verb, last.to) == ("release", "PENDING")
    assert last.reason.startswith("redis_error: ctx.")
    assert "TimeoutError" in last.reason
    assert raw_task(engine, task.id).get("error_kind", "") == ""
    assert engine.check() == []


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("Connection refused"),
        redis.exceptions.OutOfMemoryError("OOM command not allowed"),
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
    ],
    ids=["connection", "full", "read-only", "loading"],
)
def test_every_kind_of_redis_fault_in_an_engine_call_releases_the_attempt(engine, error):
    register_stall_types(engine)
    task = engine.submit("reports", {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.progress = failing(error)

    execute(engine, lease)

    assert engine.get(task.id).status == State.PENDING
    assert engine.history(task.id)[-1].reason.startswith("redis_error: ctx.progress failed")


def test_a_release_that_cannot_reach_redis_either_leaves_the_attempt_to_its_lease(engine):
    register_stall_types(engine)
    task = engine.submit("reports", {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.progress = failing(STALL)
    engine.release = failing(redis.ConnectionError("Connection refused"))

    execute(engine, lease)  # no error escapes: the sweeper reclaims the task when its lease lapses

    done = engine.get(task.id)
    assert (done.status, done.attempt) == (State.PROCESSING, 1)
    assert engine.redis.zscore(engine.keys.task(task.id).leases, task.id) is not None


def test_a_redis_error_of_the_task_own_code_is_its_retryable_failure(engine):
    register_stall_types(engine)
    task = engine.submit("uses_redis", {}, owner="alice")
    lease = engine.claim(task.id, "w1")

    execute(engine, lease)

    done = engine.get(task.id)
    assert (done.status, done.attempt, done.error_kind) == (State.RETRY_WAITING, 1, "TimeoutError")
