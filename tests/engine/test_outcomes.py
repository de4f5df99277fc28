"""complete.lua, fail.lua, release.lua: how the lease holder ends an attempt.

One test per return code of each script, the backoff policy (fixed schedule and exponential,
with jitter), and the fencing contract for each ending call.
"""

import random

import pytest

from ghostless import Backoff, LeaseLost, State
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import (
    HOLDER_CALLS,
    assert_only_stale_recorded,
    claimed,
    ended_at,
    purge_due_ms,
    queue_snapshot,
    raw_task,
    sibling,
    snapshot,
)
from tests.support.wait import wait_for_server_time

VERBS = ["complete", "fail", "release"]


def retry_delay_ms(engine, task_id) -> int:
    """next_retry_at minus the time of the failure, both server ms as stored."""
    h = raw_task(engine, task_id)
    assert h["status"] == State.RETRY_WAITING
    return int(h["next_retry_at"]) - int(h["state_since"])


def next_attempt(engine, task_id, worker="w"):
    """Wait (on the server clock) for the retry time, sweep it back to PENDING, claim it."""
    wait_for_server_time(engine.redis, int(raw_task(engine, task_id)["next_retry_at"]))
    assert engine.sweep().promoted == 1
    return engine.claim(task_id, worker)


# -- complete -------------------------------------------------------------------------------------


def test_completion_stores_the_result_and_ends_the_task_in_success(engine):
    task, lease = claimed(engine)
    before = queue_snapshot(engine, "images")
    assert engine.complete(lease, {"url": "s3://cat.png"}) == State.SUCCESS
    after = queue_snapshot(engine, "images")
    changed = {k for k in after["stats"] if after["stats"][k] != before["stats"].get(k)}
    run_bucket = {k for k in changed if k.startswith("run_h:")}  # the run time histogram's bucket
    assert len(run_bucket) == 1
    # tis_ms may stay 0 within 1 ms; it is the run histogram's total too
    assert changed - run_bucket <= {"tis_ms:PROCESSING"}
    moved = {k: n - before["counts"].get(k, 0) for k, n in after["counts"].items() if n != before["counts"].get(k)}
    assert moved == {"PROCESSING>SUCCESS": 1}  # the one counter of the move
    figures = engine.stats()["images"]
    assert (figures["entered"]["SUCCESS"], figures["counts"]["PROCESSING"]) == (1, 0)
    assert "PROCESSING" in figures["time_in_state"]
    got = engine.get(task.id)
    assert (got.status, got.result, got.progress, got.version) == (State.SUCCESS, {"url": "s3://cat.png"}, 1.0, 3)
    assert got.finished_at is not None and got.lease_deadline is None
    k = engine.keys.task(task.id)
    assert engine.redis.zscore(k.leases, task.id) is None
    finished_ms = int(raw_task(engine, task.id)["state_since"])
    assert ended_at(engine, task.id) == finished_ms and engine.redis.zscore(k.expiry, task.id) is None
    assert purge_due_ms(engine, task.id) == finished_ms + engine.config.retention * 1000
    event = engine.history(task.id)[-1]
    assert (event.verb, event.from_, event.to, event.worker) == ("complete", "PROCESSING", "SUCCESS", "w1")
    assert engine.stats()["images"]["counts"]["SUCCESS"] == 1
    assert engine.check() == []


def test_completion_repeated_with_the_same_lease_is_replayed_and_never_overwrites(engine):
    task, lease = claimed(engine)
    engine.complete(lease, {"n": 1})
    before = snapshot(engine, task.id)
    assert engine.complete(lease, {"n": 2}) == State.SUCCESS
    assert snapshot(engine, task.id) == before
    assert engine.get(task.id).result == {"n": 1}


# -- fail -----------------------------------------------------------------------------------------


def test_failed_attempts_wait_the_fixed_backoff_then_the_last_one_fails_the_task(engine):
    task, lease = claimed(engine)  # render: 3 attempts, Backoff.fixed([0.05, 0.1])
    assert engine.fail(lease, "boom", "first") == State.RETRY_WAITING
    assert retry_delay_ms(engine, task.id) == 50
    got = engine.get(task.id)
    assert (got.error_kind, got.reason, got.finished_at) == ("boom", "first", None)
    assert engine.redis.zscore(engine.keys.task(task.id).retries, task.id) == got.next_retry_at * 1000
    assert engine.check() == []

    lease = next_attempt(engine, task.id)
    assert (lease.attempt, lease.token) == (2, 2)
    assert engine.fail(lease, "boom", "second") == State.RETRY_WAITING
    assert retry_delay_ms(engine, task.id) == 100

    lease = next_attempt(engine, task.id)
    assert engine.fail(lease, "boom", "third") == State.FAILED
    got = engine.get(task.id)
    assert (got.status, got.attempt, got.reason) == (State.FAILED, 3, "third")
    assert got.finished_at is not None
    assert ended_at(engine, task.id) == int(raw_task(engine, task.id)["state_since"])
    assert engine.stats()["images"]["failures"] == {"boom": 3}
    assert engine.check() == []


def test_exponential_backoff_multiplies_each_delay_by_the_factor_up_to_the_cap(engine):
    engine.task(
        name="expo",
        queue="images",
        max_attempts=5,
        backoff=Backoff.exponential(base=0.01, factor=1.5, cap=0.03, jitter=0),
    )(lambda ctx, **kw: None)
    task, lease = claimed(engine, "expo")
    delays = []
    for attempt in range(1, 5):
        if attempt > 1:
            lease = next_attempt(engine, task.id)
        assert engine.fail(lease, "boom") == State.RETRY_WAITING
        delays.append(retry_delay_ms(engine, task.id))
    assert delays == [10, 15, 22, 30]  # 10 * 1.5**(n-1), floored to ms, capped at 30
    assert engine.check() == []


@pytest.mark.parametrize(
    "backoff, expected_ms",
    [
        (Backoff.exponential(base=1, factor=2, cap=300, jitter=0.5), 750),  # 1000 * (1 - 0.5 * 0.5)
        (Backoff.fixed([0.2], jitter=0.5), 150),  # 200 * (1 - 0.5 * 0.5)
    ],
)
def test_jitter_takes_up_to_its_fraction_off_the_delay(engine, monkeypatch, backoff, expected_ms):
    engine.task(name="jittery", queue="images", backoff=backoff)(lambda ctx, **kw: None)
    task, lease = claimed(engine, "jittery")
    monkeypatch.setattr(random, "random", lambda: 0.5)
    engine.fail(lease, "boom")
    assert retry_delay_ms(engine, task.id) == expected_ms


@pytest.mark.parametrize("kw", [{"error_kind": "bad_prompt"}, {"error_kind": "boom", "retryable": False}])
def test_permanent_or_unretryable_failure_fails_the_task_with_attempts_left(engine, kw):
    task, lease = claimed(engine)
    assert engine.fail(lease, **kw) == State.FAILED
    got = engine.get(task.id)
    assert (got.status, got.attempt, got.max_attempts, got.next_retry_at) == (State.FAILED, 1, 3, None)
    assert engine.redis.zscore(engine.keys.task(task.id).retries, task.id) is None
    assert engine.check() == []


def test_failure_repeated_with_the_same_lease_is_replayed_and_changes_nothing(engine):
    task, lease = claimed(engine)
    engine.fail(lease, "boom", "once")
    before = snapshot(engine, task.id)
    assert engine.fail(lease, "boom", "once") == State.RETRY_WAITING
    assert snapshot(engine, task.id) == before
    assert engine.stats()["images"]["failures"] == {"boom": 1}


# -- release --------------------------------------------------------------------------------------


def test_release_returns_the_task_to_pending_without_consuming_an_attempt(engine):
    task, lease = claimed(engine)
    engine.release(lease, "worker shutting down")
    got = engine.get(task.id)
    assert (got.status, got.attempt, got.stage) == (State.PENDING, 0, "")
    k = engine.keys.task(task.id)
    assert engine.redis.zscore(k.dispatch, task.id) is not None
    assert engine.redis.zscore(k.leases, task.id) is None
    event = engine.history(task.id)[-1]
    assert (event.verb, event.to, event.reason, event.attempt) == ("release", "PENDING", "worker shutting down", 1)
    again = engine.claim(task.id, "w2")
    assert (again.attempt, again.token) == (1, 2)
    assert engine.check() == []


def test_release_with_an_executor_dispatches_the_task_again(engine):
    executor = FakeDispatcher()
    engine = sibling(engine, dispatcher=executor)
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    lease = engine.claim(task.id, "w1", dispatch_id=executor.dispatches(task.id)[0])
    engine.release(lease)
    assert engine.get(task.id).status == State.QUEUED
    assert len(executor.dispatches(task.id)) == 2
    assert raw_task(engine, task.id)["dispatch_id"] == executor.dispatches(task.id)[-1]
    assert engine.check() == []


def test_release_repeated_with_the_same_lease_is_replayed_and_changes_nothing(engine):
    task, lease = claimed(engine)
    engine.release(lease)
    before = snapshot(engine, task.id)
    engine.release(lease)
    assert snapshot(engine, task.id) == before


# -- every ending call (NOT_FOUND, stale tokens, CANCELLED: tests/engine/test_lease_holder.py) -------


@pytest.mark.parametrize("verb", VERBS)
def test_ending_call_after_another_outcome_with_the_same_lease_is_lease_lost(engine, verb):
    task, lease = claimed(engine)
    other = "fail" if verb == "complete" else "complete"
    HOLDER_CALLS[other](engine, lease)
    before = snapshot(engine, task.id)
    with pytest.raises(LeaseLost):
        HOLDER_CALLS[verb](engine, lease)
    assert_only_stale_recorded(engine, before, task.id, verb, lease.token)


def test_time_in_stage_counts_the_last_stage_when_the_attempt_ends(engine):
    task, lease = claimed(engine)
    engine.stage(lease, "generating")
    wait_for_server_time(engine.redis, int(raw_task(engine, task.id)["stage_since"]))
    engine.complete(lease, {})
    assert engine.stats()["images"]["time_in_stage"]["generating"] > 0
