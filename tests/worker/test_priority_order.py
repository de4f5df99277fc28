"""On real RQ lists a saturated worker starts higher priorities first, FIFO within one."""

import pytest
from rq.job import Job

from ghostless import Engine
from ghostless.core.keys import rq_queue_name
from ghostless.core.text import text
from ghostless.execution.rq_dispatch import attempt_room
from ghostless.execution.worker import build_worker


def line(redis_server):
    """An engine on the flushed session Redis with one type, ``job``, that records who started."""
    client = redis_server.client()
    client.flushall()
    engine = Engine(client, namespace="prio")
    started = []

    @engine.task(queue="line", lease=30)
    def job(ctx, name):
        started.append(name)

    return engine, started


@pytest.mark.slow
def test_a_busy_worker_takes_higher_priority_first_then_first_in_first_out(redis_server):
    engine, started = line(redis_server)
    # Everything is queued before the worker starts: it is saturated from the first pop.
    for name, priority in [("low-1", -1), ("mid-1", 0), ("high-1", 3), ("mid-2", 0), ("high-2", 3), ("low-2", -1)]:
        engine.submit("job", {"name": name}, owner="alice", priority=priority)
    lines = {t.args["name"]: t.position for t in engine.list_tasks(owner="alice")[0]}
    assert build_worker(engine, worker_class="simple").work(burst=True, logging_level="WARNING")
    assert started == ["high-1", "high-2", "mid-1", "mid-2", "low-1", "low-2"]
    assert sorted(lines, key=lines.get) == started  # the positions predicted that order


@pytest.mark.slow
def test_a_reclaimed_task_is_the_next_job_of_its_priority_not_the_last(redis_server):
    engine, started = line(redis_server)
    lost = engine.submit("job", {"name": "lost"}, owner="alice")
    engine.claim(lost.id, "a-worker-that-dies")  # its RQ job stays behind: refused when popped
    for name, priority in [("mid-1", 0), ("mid-2", 0), ("high-1", 3), ("mid-3", 0), ("low-1", -1)]:
        engine.submit("job", {"name": name}, owner="alice", priority=priority)
    assert engine.reclaim(lost.id, by="ops").value == "QUEUED"
    assert engine.get(lost.id).position == 1  # behind high-1 only
    assert build_worker(engine, worker_class="simple").work(burst=True, logging_level="WARNING")
    assert started == ["high-1", "lost", "mid-1", "mid-2", "mid-3", "low-1"]


@pytest.mark.slow
def test_a_job_may_start_a_head_of_a_longer_timeout_type_and_rq_gives_it_that_time(redis_server):
    engine, started = line(redis_server)

    @engine.task(queue="line", lease=30, timeout=3600)
    def film(ctx, name):
        started.append(name)

    quick = engine.submit("job", {"name": "quick"}, owner="alice")
    engine.submit("film", {"name": "film"}, owner="alice", priority=3)
    [job_id] = engine.redis.lrange("rq:queue:" + rq_queue_name("prio", "line"), 0, 0)
    # The job made for the 600 s task may run the 3,600 s one: RQ must not kill it at 630 s.
    assert int(engine.redis.hget(b"rq:job:" + job_id, "timeout")) == 3600 + 30
    assert build_worker(engine, worker_class="simple").work(burst=True, logging_level="WARNING")
    assert started == ["film", "quick"]
    assert engine.get(quick.id).status.value == "SUCCESS"


def test_a_head_whose_timeout_has_a_fraction_of_a_second_fits_the_jobs_of_its_queue(redis_server):
    engine, _ = line(redis_server)
    engine.task(name="film", queue="line", lease=30, timeout=900.5)(lambda ctx, name: None)
    low = engine.submit("job", {"name": "low"}, owner="alice").id
    high = engine.submit("film", {"name": "high"}, owner="alice", priority=5).id
    job = Job.fetch(text(engine.redis.hget(engine.keys.task(low).task, "dispatch_id")), connection=engine.redis)
    assert job.timeout == 931  # rounded up: RQ's limit covers the 900.5 s attempt
    assert engine.claim(low, "w1", dispatch_id=job.id, room=attempt_room(job)).task_id == high
