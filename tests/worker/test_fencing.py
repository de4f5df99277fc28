"""Fencing with real processes: a worker frozen past its lease loses the task to another
worker, and when it wakes up its outcome is refused."""

import os
import signal

import pytest

from ghostless import State
from tests.support.wait import wait_for_server_time, wait_until
from tests.worker.helpers import OWNER, horse_of, logged, raw_result, verbs, wait_logged, wait_status, wait_terminal

pytestmark = pytest.mark.slow


def _groups(worker, worker_class):
    """Process groups to freeze: the worker's, and its work-horse's (a group of its own)."""
    groups = [worker.pid]
    if worker_class == "fork":
        groups.append(horse_of(worker))
    return groups


@pytest.mark.parametrize("worker_class", ["simple", "fork"])
def test_a_worker_paused_past_its_lease_is_fenced_off(engine, procs, worker_class):
    procs.sweeper()
    a = procs.worker(worker_class)
    task = engine.submit("sleepy", {"seconds": 2.5}, owner=OWNER)
    start_a = wait_logged(engine, task.id, "start")[0]
    groups = _groups(a, worker_class)
    for pgid in groups:
        os.killpg(pgid, signal.SIGSTOP)
    try:
        # The sweeper reclaims the lease; B takes attempt 2 while A is frozen.
        wait_until(
            lambda: "expire:PROCESSING->TIMEOUT:heartbeat_lost" in verbs(engine, task.id),
            10,
            what="the sweeper's reclaim",
        )
        b = procs.worker(worker_class)
        running = wait_status(engine, task.id, State.PROCESSING)
        assert (running.attempt, running.token) == (2, 2)
        assert wait_status(engine, task.id, State.PROCESSING).worker == b.name
        wait_logged(engine, task.id, "start", count=2)
        # A's function (2.5 s) ends while A is frozen: on waking it goes to report success.
        claimed_by_a = next(e for e in engine.history(task.id) if e.verb == "claim")
        wait_for_server_time(engine.redis, (claimed_by_a.at + 2.6) * 1000)
    finally:
        for pgid in groups:
            os.killpg(pgid, signal.SIGCONT)

    # A's late outcome is refused (stale token 1 while B holds token 2): counted and recorded.
    wait_until(lambda: engine.stats()["work"]["stale_rejections"] >= 1, 5, what="a stale rejection")
    done = wait_terminal(engine, task.id)
    assert (done.status, done.attempt, done.token, done.worker) == (State.SUCCESS, 2, 2, b.name)
    b_pid = int(logged(engine, task.id, "start")[1].split(":")[2])
    assert raw_result(engine, task.id) == {"slept": 2.5, "pid": b_pid} == done.result
    assert int(start_a.split(":")[2]) != b_pid

    history = engine.history(task.id)
    stale = [e for e in history if e.kind == "stale"]
    assert stale and all(e.worker == a.name and str(e.extra["token"]) == "1" for e in stale)
    assert {e.verb for e in stale} <= {"complete", "heartbeat"}
    assert [e.worker for e in history if e.kind == "transition" and e.verb == "complete"] == [b.name]
    assert engine.stats()["work"]["stale_rejections"] == len(stale)
    assert engine.check() == []
