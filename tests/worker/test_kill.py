"""Killed workers: a dead work-horse is reported at once by its parent; a dead worker (parent
and horse) is reclaimed by the sweeper when its lease lapses."""

import os
import signal

import pytest

from ghostless import State
from tests.support.wait import wait_until
from tests.worker.helpers import OWNER, horse_of, logged, verbs, wait_logged, wait_terminal

pytestmark = pytest.mark.slow


def test_sigkill_of_the_work_horse_is_reported_at_once_and_the_task_runs_again(engine, procs):
    worker = procs.worker("fork")  # no sweeper: recovery must not wait for one
    task = engine.submit("sleepy", {"seconds": 1.0}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    horse = horse_of(worker)
    killed_at = engine.redis.time()

    os.kill(horse, signal.SIGKILL)

    # The parent reports the loss with the lease's token: no lease has to lapse.
    fail = wait_until(
        lambda: next((e for e in engine.history(task.id) if e.verb == "fail"), None),
        5,
        what="the fail reported by the worker's parent",
    )
    assert (fail.from_, fail.to, fail.attempt, fail.worker) == ("PROCESSING", "RETRY_WAITING", 1, worker.name)
    assert "worker_lost" in fail.reason and "SIGKILL" in fail.reason
    assert fail.at - (int(killed_at[0]) + int(killed_at[1]) / 1e6) < 1.0  # well within the 1.5 s lease

    done = wait_terminal(engine, task.id)
    assert (done.status, done.attempt, done.worker) == (State.SUCCESS, 2, worker.name)
    assert done.result["pid"] not in (horse, worker.pid)
    assert [e.split(":")[:2] for e in logged(engine, task.id, "start")] == [["1", "start"], ["2", "start"]]
    assert logged(engine, task.id, "done")[0].startswith("2:")  # attempt 1 never finished
    assert "expire:PROCESSING->TIMEOUT:heartbeat_lost" not in verbs(engine, task.id)
    assert engine.stats()["work"]["failures"] == {"worker_lost": 1}
    assert worker.alive()
    assert engine.check() == []


def test_a_task_whose_last_work_horse_is_killed_fails_for_good_in_an_error_line(engine, procs):
    # The ghost task itself, OOM-killed on every attempt: an operator alerting on ERROR lines sees it.
    worker = procs.worker("fork")
    task = engine.submit("sleepy", {"seconds": 30.0}, owner=OWNER)  # 2 attempts
    for attempt in (1, 2):
        wait_logged(engine, task.id, "start", count=attempt)
        os.kill(horse_of(worker), signal.SIGKILL)
        wait_until(lambda: engine.get(task.id).attempt > attempt or engine.get(task.id).status == State.FAILED, 10)

    done = wait_terminal(engine, task.id)

    assert (done.status, done.attempt, done.error_kind) == (State.FAILED, 2, "worker_lost")
    line = f"ghostless.worker ERROR task {task.id} failed for good at attempt 2: worker_lost: work-horse"
    out = wait_until(lambda: line in (o := worker.output()) and o, 10, what="the worker's line for the task")
    assert out.count(f"task {task.id} failed for good") == 1
    assert f"ghostless.worker WARNING task {task.id}: reported lost" in out  # attempt 1: retried


def test_sigkill_of_the_whole_worker_is_reclaimed_after_its_lease_by_another_worker(engine, procs):
    procs.sweeper()
    first = procs.worker("fork")
    task = engine.submit("sleepy", {"seconds": 1.0}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    horse = horse_of(first)

    os.kill(first.pid, signal.SIGKILL)  # the parent first, so nobody is left to report
    os.kill(horse, signal.SIGKILL)
    first.popen.wait(5)
    second = procs.worker("fork")

    done = wait_terminal(engine, task.id, timeout=20)

    assert (done.status, done.attempt, done.worker) == (State.SUCCESS, 2, second.name)
    history = engine.history(task.id)
    expire = [e for e in history if e.verb == "expire"]
    assert [(e.from_, e.to, e.reason) for e in expire] == [
        ("PROCESSING", "TIMEOUT", "heartbeat_lost"),
        ("TIMEOUT", "RETRY_WAITING", "heartbeat_lost"),
    ]
    assert expire[0].worker == first.name
    assert "fail" not in [e.verb for e in history]
    claims = [e for e in history if e.verb == "claim"]
    assert [(e.worker, e.attempt) for e in claims] == [(first.name, 1), (second.name, 2)]
    # reclaimed no earlier than the lease allows after the kill's last heartbeat
    assert expire[0].at - claims[0].at >= 1.5
    assert [e.split(":")[0] for e in logged(engine, task.id, "done")] == ["2"]
    assert engine.check() == []
