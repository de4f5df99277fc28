"""Redis full (maxmemory reached under the required noeviction policy): writes are refused with
OOM errors while reads still work. A lease that cannot be renewed must stop the attempt, and the
sweeper must still be there to reclaim it once memory is freed."""

import pytest

from ghostless import State
from tests.support.wait import wait_for_server_time, wait_until
from tests.worker.helpers import LEASE, OWNER, logged, transitions, wait_logged, wait_terminal

pytestmark = pytest.mark.slow

BEAT = LEASE / 3


class RedisFull:
    """While active, Redis refuses every write (maxmemory 1 byte, noeviction)."""

    def __init__(self, engine):
        self.redis = engine.redis

    def __enter__(self):
        self.redis.config_set("maxmemory", 1)
        return self

    def __exit__(self, *exc):
        self.redis.config_set("maxmemory", 0)
        return False


def test_an_attempt_whose_heartbeats_are_refused_is_abandoned(engine, procs):
    worker = procs.worker("simple")
    task = engine.submit("sleepy", {"seconds": 30}, owner=OWNER)
    wait_logged(engine, task.id, "start")

    with RedisFull(engine):
        # Three refused heartbeats (0.5 s apart), then the function is told to stop: its outcome
        # is never reported. Before, the heartbeat thread died of the first OOM error and the
        # attempt ran on for its 30 s with nobody renewing or watching its lease.
        wait_until(
            lambda: "failed (3)" in worker.output() and "not reporting the outcome" in worker.output(),
            3 * BEAT + LEASE + 3,
            what="the attempt abandoned",
        )
        # nothing could be written meanwhile (reads work: tests/engine/test_read.py)
        assert engine.redis.hget(engine.keys.task(task.id).task, "status") == b"PROCESSING"
    assert logged(engine, task.id, "done") == []


def test_the_sweeper_outlives_a_full_redis_and_reclaims_afterwards(engine, procs):
    worker = procs.worker("simple")
    sweeper = procs.sweeper()
    task = engine.submit("sleepy", {"seconds": 2}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    wait_until(lambda: "sweeper started" in sweeper.output(), 10, what="the sweeper connected")

    with RedisFull(engine):
        # Past the lease: the sweeper tries to reclaim it while writes are refused.
        lease_until = int(engine.redis.hget(engine.keys.task(task.id).task, "lease_until"))
        wait_for_server_time(engine.redis, lease_until + 1000)
    # The same worker runs attempt 2: it rode out the full Redis (tests/worker/test_redis_outage.py).

    done = wait_terminal(engine, task.id, timeout=6)
    assert (done.status, done.attempt) == (State.SUCCESS, 2), transitions(engine, task.id)
    assert "expire:PROCESSING->TIMEOUT:heartbeat_lost" in transitions(engine, task.id)
    assert sweeper.alive() and worker.alive()
