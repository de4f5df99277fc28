"""Deadlines enforced by the sweeper on tasks that keep heartbeating, and retry delays."""

import pytest

from ghostless import State
from tests.support.wait import wait_for_server_time, wait_until
from tests.worker.helpers import OWNER, logged, transitions, wait_logged, wait_terminal

pytestmark = pytest.mark.slow


def _retry_delays(engine, task_id: str, count: int) -> list[float]:
    """Take the task through ``count`` retries with no sweeper running, each promoted by a sweep
    of the test's own once its time has come: next_retry_at minus the failure time (updated_at),
    both server time as the fail script stored them. A RETRY_WAITING task stays so until that
    sweep, so its retry time is read however slowly this machine polls (a sweeper would promote it
    after the delay, as little as 0.3 s here)."""
    delays = []
    for n in range(count):

        def waiting():
            t = engine.get(task_id)
            return t if t.status == State.RETRY_WAITING and t.attempt == n + 1 else None

        t = wait_until(waiting, 10, what=f"RETRY_WAITING after attempt {n + 1}")
        delays.append(round(t.next_retry_at - t.updated_at, 3))
        wait_for_server_time(engine.redis, t.next_retry_at * 1000)
        assert engine.sweep().promoted == 1
    return delays


def test_a_stage_that_overstays_its_deadline_times_out_and_retries_per_backoff(engine, procs):
    worker = procs.worker("fork")
    sweeper = procs.sweeper()
    task = engine.submit("stuck", {}, owner=OWNER)  # stage `generating`: 0.6 s; backoff [0.3]; 2 attempts

    done = wait_terminal(engine, task.id)

    assert (done.status, done.attempt, done.error_kind, done.reason) == (
        State.TIMEOUT,
        2,
        "timeout",
        "stage_timeout:generating",
    )
    history = engine.history(task.id)
    stage_at = [e.at for e in history if e.kind == "stage" and e.stage == "generating"]
    expires = [e for e in history if e.verb == "expire" and e.to == "TIMEOUT"]
    assert [(e.reason, e.attempt, e.stage, e.worker) for e in expires] == [
        ("stage_timeout:generating", 1, "generating", worker.name),
        ("stage_timeout:generating", 2, "generating", worker.name),
    ]
    for entered, expired in zip(stage_at, expires):
        assert 0.6 <= expired.at - entered < 0.6 + 1.0  # acted on soon after the deadline, not before
    assert transitions(engine, task.id)[-1] == "expire:PROCESSING->TIMEOUT:stage_timeout:generating"
    # the sweeper that recorded it says so in one ERROR line (written after its reply: waited
    # for); the retried expiry is INFO
    reclaimed = "lease reclaimed (stage_timeout:generating)"
    line = f"ghostless.sweeper ERROR task {task.id} failed for good: {reclaimed}; now TIMEOUT"
    out = wait_until(lambda: line in (o := sweeper.output()) and o, 10, what="the sweeper's line")
    assert out.count(f"task {task.id} failed for good") == 1
    assert f"ghostless.sweeper INFO task {task.id}: {reclaimed}; now RETRY_WAITING" in out
    promote = next(e for e in history if e.verb == "promote")
    assert 0.3 <= promote.at - expires[0].at < 0.3 + 1.0  # the backoff's delay, then promoted soon after
    # each attempt's function learnt of the lost lease at its next heartbeat and stopped
    wait_logged(engine, task.id, "noticed-lease", count=2)
    assert done.result is None
    assert engine.stats()["work"]["failures"] == {"timeout": 2}
    assert engine.check() == []


def test_an_attempt_that_outlives_its_timeout_times_out(engine, procs):
    procs.worker("simple")
    procs.sweeper()
    task = engine.submit("overtime", {}, owner=OWNER)  # attempt timeout 1 s, lease 1.5 s renewed: 1 attempt

    done = wait_terminal(engine, task.id)

    assert (done.status, done.attempt, done.error_kind, done.reason) == (State.TIMEOUT, 1, "timeout", "attempt_timeout")
    history = engine.history(task.id)
    claim = next(e for e in history if e.verb == "claim")
    expire = next(e for e in history if e.verb == "expire")
    assert 1.0 <= expire.at - claim.at < 1.0 + 1.0
    assert transitions(engine, task.id)[-1] == "expire:PROCESSING->TIMEOUT:attempt_timeout"
    assert [e.split(":")[1] for e in wait_logged(engine, task.id, "noticed-lease")] == ["noticed-lease"]
    assert engine.check() == []


def test_retry_delays_follow_an_exponential_backoff_with_jitter(engine, procs):
    procs.worker("fork")  # no sweeper: _retry_delays promotes each retry
    # Backoff.exponential(base=0.4, factor=2, cap=1.0, jitter=0.25), 4 attempts: 0.4, 0.8, 1.0 (capped),
    # each shortened by up to a quarter at random.
    task = engine.submit("unlucky", {}, owner=OWNER)

    delays = _retry_delays(engine, task.id, 3)
    done = wait_terminal(engine, task.id)

    for delay, policy in zip(delays, [0.4, 0.8, 1.0]):
        # Whole milliseconds: floor(800 * (1 - 0.25 * rnd)) may be exactly 600, and 0.8 * 0.75 is
        # 0.6000000000000001 in floating point.
        assert round(policy * 0.75, 3) <= delay <= policy, delays
    assert (done.status, done.attempt, done.error_kind) == (State.FAILED, 4, "ConnectionError")
    assert len(logged(engine, task.id, "start")) == 4
    history = engine.history(task.id)
    fails = [e for e in history if e.verb == "fail"]
    promotes = [e for e in history if e.verb == "promote"]
    assert [e.to for e in fails] == ["RETRY_WAITING"] * 3 + ["FAILED"]
    for fail, promote, delay in zip(fails, promotes, delays):
        assert promote.at - fail.at >= delay - 0.001
    assert engine.check() == []
