"""``ghostless worker --concurrency N``: N RQ workers under one supervisor. One SIGTERM stops
them all gracefully, a crashed one is started again, none outlives the supervisor, and RQ lists
each of them."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from rq import Worker

from ghostless import State
from tests.apps.basic import gate_key
from tests.support.procs import Proc, orphans, running
from tests.support.wait import wait_until
from tests.worker.helpers import OWNER, wait_logged, wait_terminal

pytestmark = pytest.mark.slow


def _pool(procs, count: int, name: str = "pool") -> Proc:
    args = [sys.executable, "worker.py", "--app", "tests.apps.basic:engine", "--concurrency", str(count)]
    proc = Proc(args + ["--name", name, "--log-level", "INFO"], procs.env)
    procs.started.append(proc)
    return proc


def _workers(engine, proc: Proc, count: int) -> list[int]:
    """The supervisor's worker processes, once there are ``count`` of them."""

    def started():
        now = proc.children()
        return now if len(now) == count else None

    return wait_until(started, 20, what=f"{count} workers")


def test_n_workers_run_n_tasks_at_once_and_rq_lists_each(engine, procs):
    pool = _pool(procs, 3)
    names = {f"pool-{i}" for i in (1, 2, 3)}
    wait_until(lambda: names <= {w.name for w in Worker.all(connection=engine.redis)}, 20, what="3 RQ workers")
    tasks = [engine.submit("gated", {"tag": str(i)}, owner=OWNER) for i in range(3)]
    for task in tasks:
        wait_logged(engine, task.id, "start", timeout=20)  # all three at once: none can end yet
    assert {engine.get(t.id).worker for t in tasks} == names
    for task in tasks:
        engine.redis.set(gate_key(task.id), 1)
    assert {wait_terminal(engine, t.id).status for t in tasks} == {State.SUCCESS}
    assert pool.alive()


def test_one_sigterm_stops_every_worker_gracefully(engine, procs):
    pool = _pool(procs, 2)
    _workers(engine, pool, 2)
    tasks = [engine.submit("sleepy", {"seconds": 1.0}, owner=OWNER) for _ in range(2)]
    for task in tasks:
        wait_logged(engine, task.id, "start", timeout=20)
    pool.signal(signal.SIGTERM)
    for task in tasks:  # each running attempt finishes within its grace
        done = wait_terminal(engine, task.id)
        assert (done.status, done.attempt) == (State.SUCCESS, 1)
    wait_until(lambda: not pool.alive(), 20, what="the supervisor to exit")
    assert pool.popen.returncode == 0, pool.output()
    assert orphans(pool) == []
    assert engine.check() == []


def test_a_crashed_worker_is_started_again(engine, procs):
    pool = _pool(procs, 2)
    first = _workers(engine, pool, 2)
    pool_before = set(first)
    victim = first[0]
    os.kill(victim, signal.SIGKILL)

    def replaced():
        now = pool.children()
        return now if len(now) == 2 and victim not in now else None

    again = wait_until(replaced, 20, what="a new worker in the killed one's place")
    assert len(set(again) - pool_before) == 1
    assert "killed by SIGKILL" in pool.output() and "starting it again" in pool.output()
    task = engine.submit("sleepy", {"seconds": 0.1}, owner=OWNER)
    assert wait_terminal(engine, task.id, timeout=20).status == State.SUCCESS
    assert pool.alive()


def test_no_worker_outlives_its_supervisor(engine, procs):
    pool = _pool(procs, 2)
    workers = _workers(engine, pool, 2)
    pool.popen.kill()  # SIGKILL: no chance to forward anything
    pool.popen.wait(10)
    for pid in workers:
        wait_until(lambda pid=pid: not running(pid), 20, what=f"worker {pid} to stop after its supervisor")


def test_concurrency_below_one_is_a_usage_error():
    from click.testing import CliRunner

    from ghostless.cli.root import main

    result = CliRunner().invoke(main, ["worker", "--app", "tests.apps.basic:engine", "--concurrency", "0"])
    assert result.exit_code == 2 and "--concurrency" in result.stderr
