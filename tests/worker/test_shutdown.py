"""Worker shutdown: the first SIGTERM lets the attempt finish within the grace period, then
releases it (no attempt consumed); a second SIGTERM stops at once and releases."""

import os
import signal
import time

import pytest

from ghostless import State
from tests.apps.basic import SLOW_BEAT_LEASE, gate_key
from tests.support.procs import running
from tests.support.wait import wait_until
from tests.worker.helpers import (
    LEASE,
    OWNER,
    logged,
    server_now,
    transitions,
    wait_logged,
    wait_status,
    wait_terminal,
)

pytestmark = pytest.mark.slow

GRACE = max(LEASE, 1.0)  # the runner's shutdown grace for the basic types


def _exited(proc, timeout: float = 10.0) -> int:
    wait_until(lambda: not proc.alive(), timeout, what=f"worker {proc.pid} to exit")
    return proc.popen.returncode


def _wait_warm_shutdown(engine, worker) -> None:
    """Until the worker has handled a first SIGTERM (RQ records it in the worker's hash)."""
    wait_until(
        lambda: engine.redis.hget(f"rq:worker:{worker.name}", "shutdown_requested_date"),
        5,
        what="the worker's warm shutdown",
    )


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_sigterm_lets_a_short_attempt_finish(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    task = engine.submit("sleepy", {"seconds": 0.5}, owner=OWNER)
    wait_logged(engine, task.id, "start")

    worker.signal(signal.SIGTERM)

    done = wait_terminal(engine, task.id)
    assert (done.status, done.attempt, done.result["slept"]) == (State.SUCCESS, 1, 0.5)
    assert [e.split(":")[1] for e in logged(engine, task.id, "done")] == ["done"]
    assert "release" not in [e.verb for e in engine.history(task.id)]
    assert _exited(worker) == 0
    assert engine.check() == []


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_sigterm_releases_a_long_attempt_after_the_grace_and_another_worker_completes_it(engine, procs, worker_class):
    first = procs.worker(worker_class)
    task = engine.submit("gated", {"tag": "long"}, owner=OWNER)
    wait_logged(engine, task.id, "start")

    sent = server_now(engine)
    first.signal(signal.SIGTERM)

    released = wait_until(
        lambda: next((e for e in engine.history(task.id) if e.verb == "release"), None), GRACE + 5, what="the release"
    )
    assert GRACE - 0.2 <= released.at - sent < GRACE + 2.0
    assert (released.from_, released.to, released.worker, released.reason) == (
        "PROCESSING",
        "PENDING",
        first.name,
        "worker shutdown",
    )
    assert _exited(first) == 0
    queued = wait_status(engine, task.id, State.PENDING, State.QUEUED)
    assert queued.attempt == 0  # the released attempt is not consumed
    assert logged(engine, task.id, "done") == []

    second = procs.worker(worker_class)
    wait_logged(engine, task.id, "start", count=2)
    engine.redis.set(gate_key(task.id), 1)
    done = wait_terminal(engine, task.id)

    assert (done.status, done.attempt, done.worker, done.result["tag"]) == (State.SUCCESS, 1, second.name, "long")
    assert [e.split(":")[0] for e in logged(engine, task.id, "start")] == ["1", "1"]
    assert transitions(engine, task.id) == [
        "submit:->PENDING",
        "dispatch:PENDING->QUEUED",
        "claim:QUEUED->PROCESSING",
        "release:PROCESSING->PENDING:worker shutdown",
        "dispatch:PENDING->QUEUED",
        "claim:QUEUED->PROCESSING",
        "complete:PROCESSING->SUCCESS",
    ]
    assert engine.check() == []


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_second_sigterm_stops_at_once_and_releases(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    task = engine.submit("gated_slow", {}, owner=OWNER)  # lease 4 s: a 4 s grace after the first SIGTERM
    wait_logged(engine, task.id, "start")

    first_sent = server_now(engine)
    worker.signal(signal.SIGTERM)
    # RQ ignores a repeat within 1 s of the first signal (duplicate delivery from a pool).
    time.sleep(1.2)
    assert engine.get(task.id).status == State.PROCESSING
    second_sent = server_now(engine)
    worker.signal(signal.SIGTERM)

    released = wait_until(
        lambda: next((e for e in engine.history(task.id) if e.verb == "release"), None), 5, what="the release"
    )
    assert released.at - second_sent < 1.5
    assert released.at - first_sent < SLOW_BEAT_LEASE  # well before the grace would have ended
    assert (released.from_, released.to, released.worker, released.reason) == (
        "PROCESSING",
        "PENDING",
        worker.name,
        "worker stopped",
    )
    assert _exited(worker, 5) is not None
    task = wait_status(engine, task.id, State.PENDING, State.QUEUED)
    assert task.attempt == 0
    assert logged(engine, task.id, "done") == []
    assert engine.check() == []


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_repeated_sigterm_within_a_second_is_ignored(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    task = engine.submit("gated", {}, owner=OWNER)
    wait_logged(engine, task.id, "start")

    sent = server_now(engine)
    worker.signal(signal.SIGTERM)
    _wait_warm_shutdown(engine, worker)
    worker.signal(signal.SIGTERM)  # a duplicate (from a pool and from the terminal): within 1 s

    # Still a warm shutdown: the attempt keeps its grace, then is released as on one SIGTERM.
    released = wait_until(
        lambda: next((e for e in engine.history(task.id) if e.verb == "release"), None), GRACE + 5, what="the release"
    )
    assert (released.reason, released.worker) == ("worker shutdown", worker.name)
    assert released.at - sent >= GRACE - 0.2
    assert _exited(worker) == 0
    assert engine.check() == []


def test_a_simple_worker_keeps_the_lease_until_a_blocked_function_returns(engine, procs):
    # The forced stop at the end of the grace lands only when the blocking call returns; meanwhile
    # the lease stays renewed, so no other worker starts the task while this attempt still runs.
    first = procs.worker("simple")
    procs.sweeper()
    seconds = GRACE + 2 * LEASE + 1
    task = engine.submit("blocked", {"seconds": seconds}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    first.signal(signal.SIGTERM)
    procs.worker("simple")

    assert wait_terminal(engine, task.id, timeout=seconds + 15).status == State.SUCCESS
    history = engine.history(task.id)
    assert "expire" not in [e.verb for e in history]  # the lease never lapsed
    claims = [e for e in history if e.verb == "claim"]
    released = next(e for e in history if e.verb == "release")
    # Released when the blocking call returned, and only then claimed again: one attempt at a time.
    assert released.at >= claims[0].at + seconds - 0.1
    assert claims[1].at > released.at and claims[1].attempt == 1
    assert engine.check() == []


def test_a_work_horse_that_cannot_release_exits_and_its_parent_releases_the_task(engine, procs):
    worker = procs.worker("fork")
    task = engine.submit("unreleasable", {}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    horses = worker.children()
    worker.signal(signal.SIGTERM)

    released = wait_until(
        lambda: next((e for e in engine.history(task.id) if e.verb == "release"), None),
        GRACE + 8,
        what="the release by the worker's parent",
    )
    assert released.reason.startswith("work-horse exited with status 1"), released.reason
    wait_until(lambda: not any(running(pid) for pid in horses), 5, what="the work-horse to end")
    assert wait_status(engine, task.id, State.PENDING, State.QUEUED).attempt == 0
    assert logged(engine, task.id, "done") == []
    assert _exited(worker) is not None
    assert engine.check() == []


def test_sigterm_to_the_whole_process_group_still_gives_the_attempt_its_grace(engine, procs):
    # systemd (KillMode=control-group) and `docker stop` signal every process, the horse too.
    worker = procs.worker("fork")
    task = engine.submit("sleepy", {"seconds": GRACE / 2}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    for pid in [worker.pid, *worker.children()]:
        os.kill(pid, signal.SIGTERM)

    done = wait_terminal(engine, task.id)
    assert (done.status, done.attempt) == (State.SUCCESS, 1)
    assert [e.verb for e in engine.history(task.id)][-1] == "complete"
    assert _exited(worker) == 0
    assert engine.check() == []
