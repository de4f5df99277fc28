"""``--log-format json`` (env GHOSTLESS_LOG_FORMAT) on the worker and the sweeper: every line they
print is one JSON object with time, level, logger and message, and the lines about a task carry
its task_id and attempt as fields."""

from __future__ import annotations

import json
import signal
import socket

import pytest

from ghostless import State
from tests.support.wait import wait_until
from tests.worker.helpers import OWNER, wait_terminal

pytestmark = pytest.mark.slow


def json_lines(proc) -> list[dict]:
    """Every line the process printed, parsed (a line that is not one JSON object fails here)."""
    lines = [line for line in proc.output().splitlines() if line.strip()]
    assert lines, "the process printed nothing"
    parsed = [json.loads(line) for line in lines]
    for entry in parsed:
        assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= entry.keys(), entry
    return parsed


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_worker_lines_are_json_and_carry_the_task_id_and_attempt(engine, procs, worker_class):
    worker = procs.worker(worker_class, GHOSTLESS_LOG_FORMAT="json")
    procs.sweeper()  # dispatches the retry
    ok = engine.submit("render", {"prompt": "cat", "steps": 1}, owner=OWNER)
    flaky = engine.submit("flaky", {"fail_times": 1}, owner=OWNER)
    assert wait_terminal(engine, ok.id).status == State.SUCCESS
    assert wait_terminal(engine, flaky.id).status == State.SUCCESS
    wait_until(lambda: f"task {flaky.id} attempt 2: complete" in worker.output(), what="the outcome logged")

    lines = json_lines(worker)
    about = {(e["message"], e.get("attempt")) for e in lines if e.get("task_id") == ok.id}
    assert (f"task {ok.id} attempt 1: complete", 1) in about
    failed = [e for e in lines if e.get("task_id") == flaky.id and e["level"] == "WARNING"]
    assert [(e["attempt"], e["logger"]) for e in failed] == [(1, "ghostless.runner")]
    assert any(e["logger"].startswith("rq.") for e in lines)  # RQ's own lines are JSON too


def test_sweeper_lines_are_json_and_a_reclaimed_lease_names_its_task(engine, procs):
    task = engine.submit("render", {"prompt": "cat"}, owner=OWNER)
    lease = engine.claim(task.id, "gone-worker")  # a worker that dies holding the lease
    sweeper = procs.sweeper(GHOSTLESS_LOG_FORMAT="json")
    wait_until(
        lambda: engine.get(task.id).attempt == lease.attempt and engine.get(task.id).status != State.PROCESSING,
        timeout=20,
        what="the lease reclaimed",
    )
    wait_until(lambda: task.id in sweeper.output(), what="the reclaim logged")
    name = f"{socket.gethostname()}.{sweeper.pid}"
    wait_until(lambda: engine.redis.zscore(engine.keys.sweepers(), name), what="the sweeper in the registry")
    sweeper.signal(signal.SIGTERM)
    sweeper.popen.wait(10)
    assert engine.redis.zrange(engine.keys.sweepers(), 0, -1) == []  # a clean stop leaves the registry

    lines = json_lines(sweeper)
    started = [e for e in lines if e["message"].startswith("sweeper started")]
    assert started and started[0]["sweeper"] == name
    reclaimed = [e for e in lines if e.get("task_id") == task.id]
    assert reclaimed and reclaimed[0]["logger"] == "ghostless.sweeper" and "lease" in reclaimed[0]["message"]
