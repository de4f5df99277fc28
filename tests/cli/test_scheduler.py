"""ghostless scheduler: periodic tasks, exactly once per period, however many schedulers run."""

import json
import signal
import sys
from collections import Counter

import pytest

from tests.cli.conftest import one_line_error
from tests.support.procs import Proc
from tests.support.wait import server_ms, wait_for_server_time, wait_until


def periodic_tasks(engine) -> list:
    tasks, _ = engine.list_tasks(owner="scheduler", limit=500)
    return tasks


def test_scheduler_list_shows_each_schedule_and_its_next_period(engine, cli):
    result = cli("scheduler", "--list")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("tick  cron '* * * * * *'  type render  owner scheduler  next 20")
    rows = json.loads(cli("scheduler", "--list", "--json").stdout)
    assert [(r["name"], r["last_fired"]) for r in rows] == [("tick", None)]


def test_scheduler_burst_fires_the_next_period_once(engine, cli):
    assert cli("scheduler", "--burst").exit_code == 0  # first sight: the second under way is not fired
    assert periodic_tasks(engine) == []
    wait_for_server_time(engine.redis, (server_ms(engine.redis) // 1000 + 1) * 1000)  # the next period
    for _ in range(3):
        assert cli("scheduler", "--burst").exit_code == 0
    tasks = periodic_tasks(engine)
    keys = Counter(t.idempotency_key for t in tasks)
    assert tasks and set(keys.values()) == {1}, keys
    for task in tasks:
        assert task.idempotency_key == f"periodic:tick:{task.args['period']}"
    listed = json.loads(cli("scheduler", "--list", "--json").stdout)[0]
    assert listed["last_task"] in {t.id for t in tasks}


def test_scheduler_without_periodic_tasks_is_a_usage_error(engine, cli, monkeypatch):
    monkeypatch.setenv("GHOSTLESS_TEST_CRON", "")
    one_line_error(cli("scheduler", "--burst"), 2, "no periodic tasks in the app")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["real"], indirect=True)  # other processes: a real redis-server
def test_two_schedulers_and_a_restart_make_exactly_one_task_per_period(engine):
    """Two scheduler processes tick every 0.2 s on a per-second cron; one is killed (SIGKILL)
    and replaced mid-way. Every period that got a task got exactly one."""
    import os

    def scheduler() -> Proc:
        return Proc(
            [sys.executable, "-m", "ghostless", "scheduler", "--interval", "0.2"],
            {**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def periods() -> Counter:
        return Counter(t.idempotency_key for t in periodic_tasks(engine))

    first, second = scheduler(), scheduler()
    started = [first, second]
    try:
        wait_until(lambda: len(periods()) >= 3, timeout=20, what="three periods fired by two schedulers")
        first.signal(signal.SIGKILL)
        first.popen.wait(10)
        started.append(scheduler())
        fired = len(periods())
        wait_until(lambda: len(periods()) >= fired + 2, timeout=25, what="two more periods after the restart")
        second.signal(signal.SIGTERM)
        assert second.popen.wait(10) == 0, second.output()
    finally:
        for proc in started:
            proc.stop()
    counts = periods()
    assert set(counts.values()) == {1}, counts
    for task in periodic_tasks(engine):
        assert task.idempotency_key == f"periodic:tick:{task.args['period']}"
        assert task.args["period"].endswith("Z") and task.status.value == "PENDING"
    logs = first.output() + second.output() + started[2].output()
    assert "Traceback" not in logs, logs
