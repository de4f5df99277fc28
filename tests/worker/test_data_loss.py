"""Real worker and sweeper processes notice a Redis restarted without persistence (all data gone):
each logs an error instead of carrying on as if an empty Redis were healthy (engine/core/epoch.py)."""

import pytest

from ghostless.core import sweepers
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def server(private_redis):
    """AOF and RDB off: a restart loses everything."""
    return private_redis()


def test_a_worker_and_a_sweeper_log_an_error_when_redis_loses_its_data(engine, procs, server):
    worker = procs.worker("simple")
    sweeper = procs.sweeper()
    marker = engine.keys.data_epoch()
    wait_until(lambda: engine.redis.exists(marker), 10, what="the marker written by the first process")
    # Each has seen the marker: the worker's "Listening on" comes after it adopted the epoch, the
    # sweeper's first tick too ("sweeper started" comes before; a restart then is a new Redis to it).
    wait_until(
        lambda: sweepers.tick_ages(engine) and "Listening on" in worker.output(),
        20,
        what="both processes running, each with the data epoch adopted",
    )
    server.restart()
    for proc in (worker, sweeper):
        wait_until(
            lambda: "Redis lost its data: the data epoch marker" in proc.output(), 20, what=f"{proc.args[3]}'s error"
        )
    assert worker.alive() and sweeper.alive()
