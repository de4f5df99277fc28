"""RQ's view of ghostless's jobs (issue 15): a job whose attempt failed is failed in RQ too, in
its failed job registry with the reason; a job whose attempt succeeded is finished. The task's
own record is unchanged by it: the failure was recorded first, and the retry is the engine's."""

import pytest
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from ghostless import State
from ghostless.execution.worker import build_worker
from tests.worker.helpers import status_engine


def job_of(engine, registry, task_id: str) -> Job:
    jobs = [Job.fetch(j, connection=engine.redis, serializer=JSONSerializer) for j in registry.get_job_ids()]
    mine = [j for j in jobs if j.args == [task_id]]
    assert len(mine) == 1, (task_id, [j.args for j in jobs])
    return mine[0]


@pytest.mark.parametrize("worker_class", ["simple", "fork"])
def test_a_failed_attempt_is_a_failed_rq_job_and_a_success_a_finished_one(redis_server, worker_class):
    engine = status_engine(redis_server)
    fine = engine.submit("fine", {}, owner="alice")
    flaky = engine.submit("flaky", {}, owner="alice")
    hopeless = engine.submit("hopeless", {}, owner="alice")
    build_worker(engine, worker_class=worker_class).work(burst=True, logging_level="CRITICAL")

    assert [engine.get(t.id).status for t in (fine, flaky, hopeless)] == [
        State.SUCCESS,
        State.RETRY_WAITING,  # its retry is the engine's, in 600 s; RQ retries nothing
        State.FAILED,
    ]
    queue = engine.dispatcher.rq_queue("status")
    assert job_of(engine, queue.finished_job_registry, fine.id).get_status() == JobStatus.FINISHED
    for task, why in ((flaky, "KeyError: 'missing input'"), (hopeless, "bad_model: no such model")):
        job = job_of(engine, queue.failed_job_registry, task.id)
        assert job.get_status() == JobStatus.FAILED
        assert f"task {task.id} attempt 1 failed: {why}" in job.latest_result().exc_string
    assert queue.finished_job_registry.count == 1 and queue.failed_job_registry.count == 2


@pytest.mark.parametrize("worker_class", ["simple", "fork"])
def test_an_attempt_that_lost_its_lease_and_then_raised_is_a_finished_rq_job(redis_server, worker_class):
    """Its failure is not the task's (the lease's new holder, or the sweeper, decides what comes
    next), so RQ shows the job as it shows any attempt that lost its lease: finished."""
    engine = status_engine(redis_server)

    @engine.task(queue="status", lease=30, max_attempts=3)
    def taken_away(ctx):
        engine.reclaim(ctx.task_id, by="admin")  # as a stuck task is: its lease is gone
        raise KeyError("after the lease was gone")

    task = engine.submit("taken_away", {}, owner="alice")
    build_worker(engine, worker_class=worker_class).work(burst=True, logging_level="CRITICAL")

    got = engine.get(task.id)  # each attempt reclaimed, retried at once, until none was left
    assert (got.status, got.attempt, got.error_kind) == (State.TIMEOUT, 3, "timeout")
    fails = [e for e in engine.history(task.id) if e.verb == "fail"]
    assert len(fails) == 3 and all(e.kind == "stale" for e in fails)  # refused, recorded as such
    queue = engine.dispatcher.rq_queue("status")
    assert queue.finished_job_registry.count == 3 and queue.failed_job_registry.count == 0
