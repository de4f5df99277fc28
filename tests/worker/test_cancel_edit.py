"""Cancel and edit of running tasks: the function stops (cooperatively or by force), its late
outcome is refused, and an edit's replacement runs with the new arguments."""

import os

import pytest

from ghostless import State
from tests.apps.basic import SLOW_BEAT_LEASE, gate_key
from tests.support.wait import wait_until
from tests.worker.helpers import (
    LEASE,
    OWNER,
    horse_of,
    logged,
    raw_result,
    server_now,
    transitions,
    wait_logged,
    wait_terminal,
)

pytestmark = pytest.mark.slow

BEAT = LEASE / 3  # heartbeat interval
GRACE = max(LEASE, 1.0)  # the runner's grace before a forced stop


def _cancel_at(engine, task_id) -> float:
    return next(e.at for e in engine.history(task_id) if e.verb == "cancel")


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_cancel_of_a_running_task_stops_its_function_at_the_next_heartbeat(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    task = engine.submit("sleepy", {"seconds": 30}, owner=OWNER)
    wait_logged(engine, task.id, "start")

    engine.cancel(task.id, by=OWNER)

    noticed = wait_logged(engine, task.id, "noticed-cancel", timeout=BEAT + GRACE)
    assert server_now(engine) - _cancel_at(engine, task.id) < BEAT + GRACE
    assert noticed[0].startswith("1:")
    # the function returned a result: not reported, since the task was cancelled
    wait_until(
        lambda: "stopping" in worker.output() or "not reporting" in worker.output(),
        5,
        what="the runner's decision in the worker log",
    )
    task = engine.get(task.id)
    assert (task.status, task.result, task.error_kind) == (State.CANCELLED, None, "cancelled")
    assert transitions(engine, task.id)[-1] == f"cancel:PROCESSING->CANCELLED:cancelled by {OWNER}"
    assert logged(engine, task.id, "done") == []
    assert worker.alive()
    assert engine.check() == []


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_cancel_of_a_task_that_ignores_it_stops_the_function_by_force(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    task = engine.submit("sleepy", {"seconds": 30, "ignore_cancel": True}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    horse = horse_of(worker) if worker_class == "fork" else None

    engine.cancel(task.id, by=OWNER)
    follow = engine.submit("render", {"prompt": "next"}, owner=OWNER)

    # The worker is free again within heartbeat + grace: the next task runs on it.
    assert wait_terminal(engine, follow.id, timeout=BEAT + GRACE + 5).status == State.SUCCESS
    assert "stopping it by force (cancelled)" in worker.output()
    if horse is not None:
        wait_until(lambda: not os.path.exists(f"/proc/{horse}"), 5, what="the work-horse gone")
    task = engine.get(task.id)
    assert (task.status, task.result) == (State.CANCELLED, None)
    assert [e.split(":")[1] for e in logged(engine, task.id, "start") + logged(engine, task.id, "done")] == ["start"]
    assert logged(engine, task.id, "noticed-cancel") == []
    assert worker.alive()
    assert engine.check() == []


def test_late_completion_of_a_cancelled_task_is_refused(engine, procs):
    procs.worker("fork")
    task = engine.submit("gated_slow", {"tag": "late"}, owner=OWNER)  # heartbeats 1.3 s apart
    wait_logged(engine, task.id, "start")
    # Right after a heartbeat, the next one is 1.3 s away: cancel, then let the function finish at once,
    # so it reports its result before its heartbeat thread learns of the cancellation.
    lease_until = lambda: engine.redis.hget(engine.keys.task(task.id).task, "lease_until")  # noqa: E731
    seen = lease_until()
    wait_until(lambda: lease_until() != seen, SLOW_BEAT_LEASE / 3 + 1, what="a heartbeat")
    engine.cancel(task.id, by=OWNER)
    engine.redis.set(gate_key(task.id), 1)

    wait_logged(engine, task.id, "done")
    stale = wait_until(
        lambda: [e for e in engine.history(task.id) if e.kind == "stale"], 5, what="the refused completion"
    )
    assert (stale[0].verb, str(stale[0].extra["token"])) == ("complete", "1")
    assert engine.stats()["work"]["stale_rejections"] == 1
    task = engine.get(task.id)
    assert (task.status, task.result, task.finished_at) == (State.CANCELLED, None, _cancel_at(engine, task.id))
    assert raw_result(engine, task.id) is None
    assert transitions(engine, task.id)[-1].startswith("cancel:PROCESSING->CANCELLED")
    assert engine.check() == []


def test_edit_of_a_running_task_cancels_it_and_runs_the_replacement(engine, procs):
    worker = procs.worker("fork")
    old = engine.submit("sleepy", {"seconds": 30}, owner=OWNER)
    wait_logged(engine, old.id, "start")

    new = engine.edit(old.id, {"seconds": 0.2}, by=OWNER)

    done = wait_terminal(engine, new.id)
    assert (done.status, done.args, done.result["slept"], done.supersedes, done.worker) == (
        State.SUCCESS,
        {"seconds": 0.2},
        0.2,
        old.id,
        worker.name,
    )
    wait_logged(engine, old.id, "noticed-cancel")
    old_task = engine.get(old.id)
    assert (old_task.status, old_task.superseded_by, old_task.result) == (State.CANCELLED, new.id, None)
    assert old_task.args == {"seconds": 30}
    assert transitions(engine, old.id)[-1].startswith("edit:PROCESSING->CANCELLED")
    assert transitions(engine, new.id) == [
        f"submit:->PENDING:edit of {old.id}",
        "dispatch:PENDING->QUEUED",
        "claim:QUEUED->PROCESSING",
        "complete:PROCESSING->SUCCESS",
    ]
    assert [e.split(":")[:2] for e in logged(engine, new.id, "done")] == [["1", "done"]]
    assert engine.check() == []
