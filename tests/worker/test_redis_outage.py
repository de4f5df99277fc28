"""Workers ride out a long Redis outage and a full Redis: still alive afterwards, no work-horse
left without its parent, logging once per change, and running tasks again by themselves."""

import time

import pytest

from ghostless import State
from tests.apps.basic import gate_key
from tests.support.procs import orphans, running
from tests.support.wait import wait_until
from tests.worker.helpers import LEASE, OWNER, horse_of, transitions, wait_logged, wait_terminal
from tests.worker.test_redis_full import RedisFull

pytestmark = pytest.mark.slow

OUTAGE = 16.0  # a call begun 2 s in and resent for ~10 s (engine/execution/worker.py: REDIS_RETRIES) still fails
FAILING, BACK = "Redis is failing", "Redis is back"


def start_gated(engine, procs, worker_class):
    """A worker running a `gated` task (it ignores ctx.cancelled): (worker, task, horse pid or None)."""
    worker = procs.worker(worker_class)
    sweeper = procs.sweeper()
    task = engine.submit("gated", {"tag": "fault"}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    wait_until(lambda: "sweeper started" in sweeper.output(), 10, what="the sweeper connected")
    return worker, task, horse_of(worker) if worker_class == "fork" else None


def assert_resumed(engine, worker, task) -> None:
    """The sweeper reclaims the attempt given up during the fault; the same worker runs the task
    again, and a new one."""
    wait_logged(engine, task.id, "start", count=2, timeout=20)
    engine.redis.set(gate_key(task.id), 1)
    done = wait_terminal(engine, task.id, timeout=20)
    assert (done.status, done.attempt) == (State.SUCCESS, 2), transitions(engine, task.id)
    fresh = engine.submit("render", {"prompt": "after the fault"}, owner=OWNER)
    assert wait_terminal(engine, fresh.id).status == State.SUCCESS
    assert worker.alive(), "the worker exited"
    assert orphans(worker) == []
    output = worker.output()
    assert output.count(FAILING) == 1 and output.count(BACK) == 1, "logged once per change"


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_worker_rides_out_a_long_redis_outage_and_resumes_by_itself(engine, server, procs, worker_class):
    worker, task, horse = start_gated(engine, procs, worker_class)
    server.kill()
    down_at = time.monotonic()
    try:
        wait_until(
            lambda: "stopping it by force (abandoned)" in worker.output(),
            LEASE * 2 + OUTAGE,
            what="the attempt given up while Redis is down",
        )
        if horse:
            wait_until(lambda: not running(horse), LEASE * 2, what="the work-horse to end")
        assert worker.alive() and orphans(worker) == []
        time.sleep(max(0.0, down_at + OUTAGE - time.monotonic()))  # the rest of the outage
        assert worker.alive() and orphans(worker) == []
    finally:
        server.start()  # same port, same data (AOF, fsync always)
    assert_resumed(engine, worker, task)


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_worker_rides_out_a_full_redis_and_resumes_by_itself(engine, procs, worker_class):
    worker, task, horse = start_gated(engine, procs, worker_class)
    with RedisFull(engine):
        # Heartbeats refused: the attempt is given up. RQ's own writes are refused meanwhile
        # (its heartbeat every 2 s while it watches a work-horse, its state, its job records).
        wait_until(
            lambda: "stopping it by force (abandoned)" in worker.output(),
            LEASE * 4 + 5,
            what="the attempt given up while Redis is full",
        )
        if horse:
            wait_until(lambda: not running(horse), LEASE * 2, what="the work-horse to end")
        wait_until(
            lambda: FAILING in worker.output() or not worker.alive(), 5, what="the worker to meet a refused write"
        )
        assert worker.alive() and orphans(worker) == []
        # As if the outage had outlived RQ's worker TTL (or a restart had lost the data): DEL and
        # SREM free memory, so a full Redis takes them.
        engine.redis.delete(f"rq:worker:{worker.name}")
        engine.redis.srem("rq:workers", f"rq:worker:{worker.name}")
    assert_resumed(engine, worker, task)
    # Back in RQ's view: registered again, with its birth (not only the heartbeat's field).
    assert engine.redis.hexists(f"rq:worker:{worker.name}", "birth")
    assert engine.redis.sismember("rq:workers", f"rq:worker:{worker.name}")
