"""Tasks run by real RQ workers (fork and simple) on a private redis-server: outcomes, stages,
progress events, history, retries, permanent errors, bad results and the type allowlist."""

import pytest

from ghostless import State
from tests.support.wait import wait_until
from tests.worker.helpers import (
    OWNER,
    logged,
    side_log,
    stream_events,
    verbs,
    wait_terminal,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_render_runs_its_stages_in_order_and_stores_its_result(engine, procs, worker_class):
    worker = procs.worker(worker_class)
    task = engine.submit("render", {"prompt": "cat", "steps": 3}, owner=OWNER)

    done = wait_terminal(engine, task.id)

    assert done.status == State.SUCCESS, verbs(engine, task.id)
    assert done.result["url"] == "https://example.invalid/cat.png"
    assert (done.attempt, done.worker, done.progress, done.error_kind, done.reason) == (1, worker.name, 1.0, "", "")
    assert [e.split(":")[:2] for e in side_log(engine, task.id)] == [["1", "start"], ["1", "done"]]
    # fork: the function ran in a work-horse, not in the worker process itself
    ran_in = done.result["pid"]
    assert (ran_in != worker.pid) if worker_class == "fork" else (ran_in == worker.pid)
    assert verbs(engine, task.id) == [
        "submit:->PENDING",
        "dispatch:PENDING->QUEUED",
        "claim:QUEUED->PROCESSING",
        "stage:waiting_for_resource",
        "stage:generating",
        "stage:uploading",
        "complete:PROCESSING->SUCCESS",
    ]
    history = engine.history(task.id)
    assert all(e.worker == worker.name for e in history[2:])
    assert [e.at for e in history] == sorted(e.at for e in history)

    events = stream_events(engine, task.id)
    assert [e["kind"] for e in events] == ["transition"] * 3 + ["stage"] * 2 + ["progress"] * 3 + [
        "stage",
        "transition",
    ]
    progress = [e for e in events if e["kind"] == "progress"]
    assert [(float(e["progress"]), e["message"], e["stage"]) for e in progress] == [
        (1 / 3, "step 1/3", "generating"),
        (2 / 3, "step 2/3", "generating"),
        (1.0, "step 3/3", "generating"),
    ]
    assert [int(e["version"]) for e in events] == sorted(int(e["version"]) for e in events)
    assert engine.check() == []


def test_flaky_task_is_retried_per_its_backoff_then_succeeds(engine, procs):
    procs.worker()
    procs.sweeper()
    task = engine.submit("flaky", {"fail_times": 2}, owner=OWNER)

    done = wait_terminal(engine, task.id)

    assert (done.status, done.attempt, done.result) == (State.SUCCESS, 3, {"attempt": 3})
    assert [e.split(":")[:2] for e in side_log(engine, task.id)] == [["1", "start"], ["2", "start"], ["3", "start"]]
    history = engine.history(task.id)
    fails = [e for e in history if e.verb == "fail"]
    assert [(e.to, e.attempt, e.reason) for e in fails] == [
        ("RETRY_WAITING", 1, "ConnectionError: upstream hiccup on attempt 1"),
        ("RETRY_WAITING", 2, "ConnectionError: upstream hiccup on attempt 2"),
    ]
    promotes = [e for e in history if e.verb == "promote"]
    # Backoff.fixed([0.2, 0.4]): promoted no earlier than the policy's delay after each failure
    waited = [round(p.at - f.at, 3) for f, p in zip(fails, promotes)]
    assert 0.2 <= waited[0] < 0.2 + 1.0 and 0.4 <= waited[1] < 0.4 + 1.0, waited
    assert verbs(engine, task.id)[-1] == "complete:PROCESSING->SUCCESS"
    assert engine.stats()["work"]["failures"] == {"ConnectionError": 2}
    assert engine.check() == []


def test_permanent_error_fails_for_good_with_its_error_kind(engine, procs):
    procs.worker()
    task = engine.submit("flaky", {"permanent": True}, owner=OWNER)

    done = wait_terminal(engine, task.id)

    assert (done.status, done.attempt, done.error_kind, done.reason) == (
        State.FAILED,
        1,
        "bad_prompt",
        "prompt rejected by policy",
    )
    assert done.result is None
    assert verbs(engine, task.id)[-1] == "fail:PROCESSING->FAILED:bad_prompt: prompt rejected by policy"
    assert len(logged(engine, task.id, "start")) == 1
    assert engine.check() == []


def test_result_that_is_not_json_fails_for_good_saying_so(engine, procs):
    procs.worker("simple")
    task = engine.submit("bad_result", {}, owner=OWNER)

    done = wait_terminal(engine, task.id)

    assert (done.status, done.error_kind, done.attempt) == (State.FAILED, "bad_result", 1)
    assert "JSON" in done.reason and done.result is None
    assert engine.check() == []


def test_a_worker_refuses_a_job_of_a_type_it_does_not_register(engine, procs):
    partial = procs.worker(app="tests.apps.partial:engine")
    refused = engine.submit("flaky", {"fail_times": 0}, owner=OWNER)
    control = engine.submit("render", {"prompt": "dog"}, owner=OWNER)

    # The partial worker takes both jobs in order: the render one runs, so the flaky one was seen.
    assert wait_terminal(engine, control.id).status == State.SUCCESS
    assert control_ran_in(engine, control.id) != partial.pid
    wait_until(
        lambda: "is not registered in this worker" in partial.output(), 5, what="the refusal in the worker's log"
    )

    task = engine.get(refused.id)
    assert task.status == State.QUEUED and task.attempt == 0  # refused before any claim: not lost, not run
    assert side_log(engine, refused.id) == []
    assert "claim" not in [e.verb for e in engine.history(refused.id)]
    assert engine.check() == []

    # A worker that runs the type picks it up once it is dispatched again.
    partial.stop()
    full = procs.worker()
    engine.dispatch(refused.id)
    done = wait_terminal(engine, refused.id)
    assert (done.status, done.worker, done.attempt) == (State.SUCCESS, full.name, 1)
    assert [e.split(":")[:2] for e in side_log(engine, refused.id)] == [["1", "start"]]
    assert engine.check() == []


def control_ran_in(engine, task_id):
    return engine.get(task_id).result["pid"]
