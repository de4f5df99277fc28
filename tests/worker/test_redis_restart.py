"""A Redis crash and restart (AOF, fsync always) in the middle of a run: workers and sweeper
ride it out, and no task is lost."""

import signal
import time

import pytest

from ghostless import Config, Engine, State
from ghostless.execution.rq_dispatch import rq_queue_name
from tests.apps import basic
from tests.apps.basic import gate_key
from tests.support.wait import wait_until
from tests.worker.helpers import (
    LEASE,
    NS,
    OWNER,
    logged,
    server_now,
    transitions,
    wait_logged,
    wait_terminal,
)

pytestmark = pytest.mark.slow

TASKS = 20


@pytest.mark.parametrize("outage", [0.0, 2.5], ids=["restart", "outage-past-the-lease"])
def test_tasks_survive_a_redis_restart_mid_run(engine, server, procs, outage):
    workers = [procs.worker("fork"), procs.worker("simple")]
    sweeper = procs.sweeper()
    ids = [engine.submit("render", {"prompt": f"p{i}", "steps": 2, "hold": 0.6}, owner=OWNER).id for i in range(TASKS)]

    def statuses():
        return [engine.get(i).status for i in ids]

    def both_busy():
        # Both workers inside a task that started < 0.3 s ago, so neither is popping a job while
        # Redis dies (see test_a_job_popped_as_redis_dies_is_dispatched_again for that instant).
        now = server_now(engine)
        tasks = [engine.get(i) for i in ids]
        running = [t for t in tasks if t.status == State.PROCESSING and now - t.started_at < 0.3]
        return sum(t.status == State.SUCCESS for t in tasks) >= 4 and len({t.worker for t in running}) == 2

    # Crash while some tasks are done, two running and the rest still queued.
    wait_until(both_busy, 20, what="a few tasks done and both workers busy")

    if not outage:
        server.restart()  # SIGKILL, then start again on the same port and data directory
    else:
        server.kill()
        time.sleep(outage)  # Redis down for longer than a lease: the sweeper may reclaim when it is back
        server.start()

    try:
        wait_until(
            lambda: all(s == State.SUCCESS for s in statuses()), 60, what="every task to succeed after the restart"
        )
    except AssertionError:
        lines = [f"{i} {engine.get(i).status.value} {transitions(engine, i)}" for i in ids]
        raise AssertionError("not all tasks succeeded:\n" + "\n".join(lines)) from None
    assert all(w.alive() for w in workers) and sweeper.alive(), "a process died of the restart"
    for task_id in ids:
        assert logged(engine, task_id, "done"), task_id  # each function ran to its end at least once
        assert engine.get(task_id).result["url"].endswith(".png")
    assert engine.check() == []
    assert engine.stats()["work"]["counts"]["SUCCESS"] == TASKS


def test_a_job_popped_as_redis_dies_is_dispatched_again(engine, server, procs):
    # The state a lost BLPOP reply leaves: the job is out of its list, its hash says queued,
    # no worker has it. Here without timing luck: the pop is done by hand before any worker runs.
    quick = basic.register(Engine(server.client(), namespace=NS, config=Config(requeue_after=1)))
    task = quick.submit("render", {"prompt": "popped"}, owner=OWNER)
    job_id = engine.redis.hget(engine.keys.task(task.id).task, "dispatch_id").decode()
    assert engine.redis.lrem(f"rq:queue:{rq_queue_name(NS, basic.QUEUE)}", 0, job_id) == 1
    procs.sweeper(GHOSTLESS_TEST_REQUEUE_AFTER="1")
    procs.worker("fork", GHOSTLESS_TEST_REQUEUE_AFTER="1")

    # Expected: the sweeper finds the job gone within requeue_after (1 s) and dispatches again.
    done = wait_terminal(engine, task.id, timeout=6)
    assert done.status == State.SUCCESS


def test_an_attempt_is_abandoned_when_redis_hangs_and_rerun_when_it_is_back(engine, server, procs):
    # A hung Redis (SIGSTOP: like a network partition, connections stay open and silent).
    worker = procs.worker("fork")
    sweeper = procs.sweeper()
    task = engine.submit("gated", {"tag": "hang"}, owner=OWNER)
    first = wait_logged(engine, task.id, "start")[0]
    wait_until(lambda: "sweeper started" in sweeper.output(), 10, what="the sweeper connected")
    server.proc.send_signal(signal.SIGSTOP)
    try:
        # Heartbeats time out within a third of the lease (their own client), not after RQ's
        # timeout (minutes) or the engine client's (10 s): the attempt is abandoned (stopped, its
        # outcome never reported) within lease + grace, while Redis is still silent.
        wait_until(
            lambda: "stopping it by force (abandoned)" in worker.output(),
            LEASE + LEASE + 5,
            what="the attempt abandoned by its heartbeat thread",
        )
    finally:
        server.proc.send_signal(signal.SIGCONT)

    # Back: the sweeper reclaims the lapsed lease and the task runs again.
    wait_logged(engine, task.id, "start", count=2, timeout=10)
    engine.redis.set(gate_key(task.id), 1)
    done = wait_terminal(engine, task.id)
    assert (done.status, done.attempt) == (State.SUCCESS, 2)
    assert "expire:PROCESSING->TIMEOUT:heartbeat_lost" in transitions(engine, task.id)
    assert first.split(":")[2] != logged(engine, task.id, "start")[1].split(":")[2]  # a new work-horse
    assert worker.alive() and sweeper.alive()
    assert engine.check() == []
