"""A worker back from a Redis failure is back in RQ's view, whichever of its calls first finds
Redis answering again (engine/execution/outage.py)."""

import pytest
import redis
from rq import SimpleWorker

from ghostless.execution.lean_rq import LeanRQ
from ghostless.execution.outage import RidesOutRedis
from tests.worker.helpers import registered


class Riding(RidesOutRedis, LeanRQ, SimpleWorker):
    pass


@pytest.fixture
def worker(redis_client):
    return registered(Riding, redis_client, "riding")


def lose_registration(worker) -> None:
    """Redis failed, and meanwhile the worker's hash and its place in the worker set were lost
    (RQ's worker TTL outlived, or a restart without persistence)."""
    worker._redis_failed(redis.ConnectionError("Connection refused"))
    worker.connection.delete(worker.key)
    worker.connection.srem("rq:workers", worker.key)


def test_a_heartbeat_that_finds_redis_back_registers_the_worker_again(worker):
    # RQ's work loop beats after each job: after a failure that ends while a job's bookkeeping
    # runs, that beat is the first write that succeeds, before the worker next dequeues.
    lose_registration(worker)
    worker.heartbeat()
    assert worker.connection.hexists(worker.key, "birth")
    assert worker.connection.sismember("rq:workers", worker.key)
    assert worker._failing_since is None


def test_a_registration_that_fails_keeps_the_worker_riding_out(worker, monkeypatch):
    lose_registration(worker)

    def refused():
        raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")

    monkeypatch.setattr(worker, "register_birth", refused)
    worker.heartbeat()
    assert worker._failing_since is not None  # the next look at Redis registers it


def test_a_worker_registered_again_writes_its_state_again(worker):
    # RQ's state write after a job can be the first to find Redis back (a restart that lost the
    # worker's hash), before the heartbeat registers the worker again with a hash of RQ's fields,
    # which hold no state: RQ's next state write (before the dequeue) must not be skipped as
    # already written (engine/execution/lean_rq.py), or `rq info` shows the worker's state as '?'.
    lose_registration(worker)
    worker.set_state("idle")  # RQ's, after the job
    worker.heartbeat()  # RQ's, after the job: finds Redis back, registers the worker again
    worker.set_state("idle")  # RQ's, before the next dequeue
    assert worker.connection.hget(worker.key, "state") == b"idle"
