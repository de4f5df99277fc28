"""What a fork worker costs Redis per job: one new connection per work-horse (RQ's commands in
the horse share the engine's pool), and no package-metadata lookup per connection."""

import pytest
import redis

from ghostless import State
from ghostless.execution.worker import resolve_driver_info_once
from tests.worker.helpers import OWNER, wait_terminal

pytestmark = pytest.mark.slow


def connections_received(engine) -> int:
    return int(engine.redis.info("stats")["total_connections_received"])


def test_a_fork_worker_opens_one_connection_per_job(engine, procs):
    procs.worker("fork")
    first = engine.submit("render", {"prompt": "warm", "steps": 1}, owner=OWNER)
    assert wait_terminal(engine, first.id).status == State.SUCCESS  # the parent's own connections exist now
    before = connections_received(engine)

    jobs = 12
    for i in range(jobs):  # one after another: every job gets a horse of its own
        task = engine.submit("render", {"prompt": f"p{i}", "steps": 1}, owner=OWNER)
        assert wait_terminal(engine, task.id).status == State.SUCCESS

    opened = connections_received(engine) - before
    # The test's own client keeps its connection; the worker's horses open one each (two before:
    # one for the engine, one for RQ). The heartbeat thread may add one when it beats mid-call.
    assert jobs <= opened <= jobs + 3, opened


def test_the_driver_info_is_resolved_once_for_the_whole_pool():
    pytest.importorskip("redis.driver_info", reason="redis-py < 8 has no DriverInfo to resolve")
    client = redis.Redis(host="127.0.0.1", port=1)  # never connected
    resolve_driver_info_once(client)
    info = client.connection_pool.connection_kwargs["driver_info"]
    assert info.lib_version  # resolved now, not per connection
    assert client.connection_pool.make_connection().driver_info is info


def test_a_driver_info_the_user_set_is_left_alone():
    pytest.importorskip("redis.driver_info", reason="redis-py < 8 has no DriverInfo to resolve")
    client = redis.Redis(host="127.0.0.1", port=1, driver_info=None)  # None: no CLIENT SETINFO
    resolve_driver_info_once(client)
    assert client.connection_pool.connection_kwargs["driver_info"] is None
