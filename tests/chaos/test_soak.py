"""Chaos soak at CI size: 500 tasks through 4 fork workers under SIGKILLs, SIGSTOP pauses longer
than the lease, a Redis restart, transient and permanent failures, cancels, RQ jobs dropped between
dequeue and claim, and 2 sweepers (tests/chaos/soak.py has the definitions; ``make chaos`` runs
10,000 tasks). Nothing may be lost, completed twice, run twice under one claim or left unfinished
at the drain deadline, and ``engine.check()`` must find nothing wrong.
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.soak import SoakConfig, run_soak
from tests.conftest import need_redis_server

CI_TASKS = int(os.environ.get("CHAOS_TASKS", "500"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_no_task_is_lost_completed_twice_or_stuck_under_chaos():
    need_redis_server()
    cfg = SoakConfig(tasks=CI_TASKS, drain_timeout=90.0, verbose=False)
    report = run_soak(cfg)
    print(report.format())  # shown with pytest -rA or -s
    assert report.submitted == cfg.tasks
    assert report.lost == [], f"lost tasks: {report.lost[:10]}\n{report.format()}"
    assert report.completed_twice == [] and report.success_counter_excess == 0, report.format()
    assert report.stuck == [], f"stuck tasks: {report.stuck[:10]}\n{report.format()}"
    assert report.phantom_successes == [], report.format()
    assert report.duplicate_executions == 0, report.format()
    assert report.check == [], report.check[:10]


def test_checker_counts_duplicate_zombie_phantom_and_refused_executions():
    """The execution checks of the soak on a made-up side-effect log (no Redis)."""
    from tests.chaos.soak import Report, _check_executions

    report = Report()
    lines = [
        ("start", 1, 1, 10, 0.0),
        ("start", 2, 2, 11, 1.0),
        ("done", 2, 2, 11, 1.5),
        ("done", 1, 1, 10, 2.0),  # token 1 ran on after token 2 started: a zombie, refused
        ("start", 2, 2, 12, 2.5),
    ]  # a second run of claim 2: a duplicate execution
    _check_executions("q.a", {"status": "SUCCESS", "ended_token": "2"}, {"token": 2}, lines, report)
    assert (
        report.executions,
        report.duplicate_executions,
        report.zombie_executions,
        report.completions_refused,
        report.phantom_successes,
    ) == (3, 1, 1, 1, [])
    # SUCCESS under a token that never logged 'done', or a result naming another token: phantom
    _check_executions(
        "q.b", {"status": "SUCCESS", "ended_token": "3"}, {"token": 3}, [("start", 3, 1, 13, 0.0)], report
    )
    _check_executions(
        "q.c",
        {"status": "SUCCESS", "ended_token": "1"},
        {"token": 9},
        [("start", 1, 1, 14, 0.0), ("done", 1, 1, 14, 0.1)],
        report,
    )
    assert report.phantom_successes == ["q.b", "q.c"]
    # a SUCCESS task stores no ended token (lua/complete.lua): its token is the one accepted
    _check_executions("q.d", {"status": "SUCCESS", "token": "4"}, {"token": 4}, [("done", 4, 1, 15, 0.1)], report)
    assert report.phantom_successes == ["q.b", "q.c"]
    assert report.problems() == [
        "phantom successes 2: ['q.b', 'q.c']",
        "duplicate executions (same task, token and claim) 1",
    ]


def test_a_cancelled_task_that_is_gone_reads_as_gone_not_as_a_harness_crash():
    """A task a failover lost is reported (acknowledged cancels undone), not an AttributeError that
    hides the whole report: Engine.get gives None for a task that does not exist."""
    import fakeredis

    from ghostless import Engine
    from tests.chaos.soak import _status

    engine = Engine(fakeredis.FakeRedis(), namespace="soak", dispatcher=None)
    engine.task(name="job", queue="chaos-a")(lambda ctx: None)
    task = engine.submit("job", {}, owner="soak")
    assert _status(engine, task.id) == "PENDING"
    assert _status(engine, "chaos-a.0123456789abcdef0123") == "gone"
