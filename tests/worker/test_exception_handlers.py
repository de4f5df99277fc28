"""What RQ's exception handlers see of ghostless's failed attempts (a worker's
``exception_handlers``, and what wraps RQ's ``handle_exception``, such as Sentry's RQ integration):
an attempt the engine will retry is a failure with ``job.retries_left`` set, as RQ marks a job its
``Retry`` will run again; the last is the exception the task's function raised. So a handler that
reports failures as Sentry's RQ integration does (none of a job with retries left) reports one per
task failed for good, the task's own exception, where it reported every attempt as ``AttemptFailed``
naming its task."""

import json
import traceback

import pytest
from rq.job import Job
from rq.serializers import JSONSerializer

from ghostless import Backoff, Breaker, PermanentError, State
from ghostless.execution.worker import build_worker
from tests.support.wait import wait_for_server_time
from tests.worker.helpers import status_engine

SEEN = "handlers:seen"


def handlers_engine(redis_server):
    """status_engine's, ``unlucky`` (KeyError, 3 attempts, each retried at once) and ``chained`` (a
    PermanentError raised while handling a KeyError)."""
    engine = status_engine(redis_server)

    @engine.task(queue="status", lease=30, max_attempts=3, backoff=Backoff.fixed([0]))
    def unlucky(ctx):
        raise KeyError("missing input")

    @engine.task(queue="status", lease=30)
    def chained(ctx):
        try:
            return {}["model"]
        except KeyError:
            raise PermanentError("no such model", kind="bad_model")  # noqa: B904 - the chain is the case

    return engine


def seeing(engine):
    """An exception handler that writes what it was given to Redis (a fork worker calls it in the
    work-horse): the exception, whether a traceback came with it, where the exception was raised,
    and the job's retries_left."""

    def handler(job, exc_type, exc_value, tb):
        raised_in = [frame.name for frame in traceback.extract_tb(exc_value.__traceback__)]
        seen = {
            "type": exc_type.__name__,
            "value": str(exc_value),
            "traceback": tb is not None,
            "raised_in": raised_in[-1:],
            "retries_left": job.retries_left,
        }
        engine.redis.rpush(SEEN, json.dumps(seen))
        return True  # and RQ's default handling after it

    return handler


def run_until_ended(engine, worker_class: str, task_id: str, attempts: int) -> None:
    for _ in range(attempts):
        build_worker(engine, worker_class=worker_class, exception_handlers=[seeing(engine)]).work(
            burst=True, logging_level="WARNING"
        )
        task = engine.get(task_id)
        if task.status != State.RETRY_WAITING:
            return
        wait_for_server_time(engine.redis, task.next_retry_at * 1000)
        assert engine.sweep().promoted == 1


@pytest.mark.parametrize("worker_class", ["simple", "fork"])
def test_handlers_see_retried_attempts_as_retries_and_the_last_as_the_tasks_own_exception(redis_server, worker_class):
    engine = handlers_engine(redis_server)
    task = engine.submit("unlucky", {}, owner="alice")

    run_until_ended(engine, worker_class, task.id, 3)

    assert (engine.get(task.id).status, engine.get(task.id).attempt) == (State.FAILED, 3)
    seen = [json.loads(s) for s in engine.redis.lrange(SEEN, 0, -1)]
    assert [(s["type"], s["retries_left"]) for s in seen] == [
        ("AttemptFailed", 2),
        ("AttemptFailed", 1),
        ("KeyError", None),
    ]
    assert seen[2]["value"] == "'missing input'" and seen[2]["raised_in"] == ["unlucky"]
    assert not any(s["traceback"] for s in seen)  # its frames are on the exception, and logged
    reported = [s for s in seen if not s["retries_left"]]  # as Sentry's RQ integration reports
    assert [s["type"] for s in reported] == ["KeyError"]
    # RQ retried nothing: the retries are the engine's; its jobs keep no retries_left
    queue = engine.dispatcher.rq_queue("status")
    assert queue.count == 0 and queue.failed_job_registry.count == 3
    jobs = Job.fetch_many(queue.failed_job_registry.get_job_ids(), connection=engine.redis, serializer=JSONSerializer)
    assert [job.retries_left for job in jobs] == [None, None, None]


def test_handlers_see_a_permanent_error_as_the_task_raised_it(redis_server, caplog):
    engine = handlers_engine(redis_server)
    task = engine.submit("hopeless", {}, owner="alice")

    run_until_ended(engine, "simple", task.id, 1)

    assert engine.get(task.id).status == State.FAILED
    [seen] = [json.loads(s) for s in engine.redis.lrange(SEEN, 0, -1)]
    assert (seen["type"], seen["value"], seen["raised_in"], seen["retries_left"]) == (
        "PermanentError",
        "no such model",
        ["hopeless"],
        None,
    )
    # RQ's line names the exception, not the task: the runner's ERROR line does, with where it was raised
    [line] = [r for r in caplog.records if r.getMessage().startswith(f"task {task.id} failed for good")]
    assert (line.levelname, line.getMessage()) == (
        "ERROR",
        f"task {task.id} failed for good at attempt 1: bad_model: no such model",
    )
    assert line.exc_info is None  # how a task refuses bad input: no traceback for any user to cause
    rq_line = next(m for m in caplog.messages if "exception raised while executing" in m)
    assert rq_line.endswith("PermanentError: no such model\n") and "Traceback" not in rq_line


def test_an_exception_that_chains_another_reaches_the_handlers_as_the_attempts_failure(redis_server, caplog):
    # RQ would print the KeyError's frames in its line: the handlers get what they got before
    engine = handlers_engine(redis_server)
    task = engine.submit("chained", {}, owner="alice")

    run_until_ended(engine, "simple", task.id, 1)

    [seen] = [json.loads(s) for s in engine.redis.lrange(SEEN, 0, -1)]
    assert (seen["type"], seen["retries_left"]) == ("AttemptFailed", None)
    assert seen["value"] == f"task {task.id} attempt 1 failed: bad_model: no such model"
    assert not any("Traceback" in m for m in caplog.messages if "exception raised while executing" in m)


def test_a_task_failed_at_once_by_an_open_breaker_is_an_error_line(redis_server, caplog):
    engine = handlers_engine(redis_server)
    fast = Breaker(threshold=0.5, min_calls=2, window=60, cooldown=60, policy="fail")
    engine.task(name="painted", queue="status", lease=30, breaker=fast, upstream="model")(lambda ctx: None)
    for _ in range(2):  # trips it: 2 of 2 calls failed
        lease = engine.claim(engine.submit("painted", {}, owner="alice").id, "w1")
        engine.fail(lease, "UpstreamTimeout", "model API timed out")
    task = engine.submit("painted", {}, owner="alice")

    run_until_ended(engine, "simple", task.id, 1)

    assert (engine.get(task.id).status, engine.get(task.id).error_kind) == (State.FAILED, "upstream_open")
    [line] = [r for r in caplog.records if r.getMessage().startswith(f"task {task.id} failed for good: ")]
    assert (line.levelname, line.getMessage()) == (
        "ERROR",
        f"task {task.id} failed for good: upstream_open: model (its breaker fails fast)",
    )
