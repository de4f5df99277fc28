"""expire.lua, promote.lua, purge.lua, due.lua and the sweeper tick (engine/core/sweep.py).

One test per return code of each sweeper script. Time passes only on the Redis server clock:
each test waits for a deadline read from the task, then sweeps.
"""

import pytest

from ghostless import Code, Config, LeaseLost, State, WrongDispatch
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import GHOST, claimed, ended_at, purge_due_ms, raw_task, sibling, snapshot
from tests.support.wait import server_ms, wait_for_server_time


def wait_for_lease_deadline(engine, task_id):
    wait_for_server_time(engine.redis, engine.get(task_id).lease_deadline * 1000)


def call(engine, script, task_id, *argv):
    return engine.scripts._call(script, engine.keys.task(task_id), list(argv))


def register_staged(engine):
    engine.task(
        name="staged", queue="images", lease=30, max_attempts=2, backoff=[0.05], stages={"fast": 0.05, "open": 0}
    )(lambda ctx, **kw: None)


# -- expire ---------------------------------------------------------------------------------------


def test_lease_without_heartbeats_expires_as_heartbeat_lost_and_is_retried_at_once(engine):
    task, lease = claimed(engine, "quick")  # lease 50 ms, 2 attempts
    wait_for_lease_deadline(engine, task.id)
    report = engine.sweep()
    assert (report.expired, report.timed_out, report.promoted, report.reasons) == (1, 0, 1, {"heartbeat_lost": 1})
    got = engine.get(task.id)
    assert (got.status, got.attempt, got.error_kind, got.reason) == (State.PENDING, 1, "timeout", "heartbeat_lost")
    moves = [(e.verb, e.from_, e.to, e.reason) for e in engine.history(task.id)[-3:]]
    assert moves == [
        ("expire", "PROCESSING", "TIMEOUT", "heartbeat_lost"),
        ("expire", "TIMEOUT", "RETRY_WAITING", "heartbeat_lost"),
        ("promote", "RETRY_WAITING", "PENDING", ""),
    ]
    assert engine.stats()["images"]["failures"] == {"timeout": 1}
    with pytest.raises(LeaseLost):  # the late holder is fenced off
        engine.heartbeat(lease)
    assert engine.check() == []


def test_stage_past_its_deadline_expires_as_stage_timeout_naming_the_stage(engine):
    register_staged(engine)
    task, lease = claimed(engine, "staged")
    engine.stage(lease, "fast")
    wait_for_lease_deadline(engine, task.id)
    report = engine.sweep()
    assert (report.expired, report.promoted, report.reasons) == (1, 0, {"stage_timeout": 1})
    got, h = engine.get(task.id), raw_task(engine, task.id)
    assert (got.status, got.reason) == (State.RETRY_WAITING, "stage_timeout:fast")
    assert int(h["next_retry_at"]) - int(h["state_since"]) == 50  # the backoff policy applies
    assert engine.history(task.id)[-2].reason == "stage_timeout:fast"
    assert engine.check() == []


def test_attempt_past_its_timeout_expires_as_attempt_timeout_and_ends_in_timeout(engine):
    task, lease = claimed(engine, "brief")  # lease 30 s, attempt timeout 50 ms, 1 attempt
    engine.heartbeat(lease)  # heartbeats do not extend the attempt
    wait_for_lease_deadline(engine, task.id)
    report = engine.sweep()
    assert (report.expired, report.timed_out, report.reasons) == (1, 1, {"attempt_timeout": 1})
    got = engine.get(task.id)
    assert (got.status, got.reason, got.error_kind) == (State.TIMEOUT, "attempt_timeout", "timeout")
    assert got.finished_at is not None
    assert ended_at(engine, task.id) == int(raw_task(engine, task.id)["state_since"])
    with pytest.raises(LeaseLost):
        engine.complete(lease, {})
    assert engine.get(task.id).result is None
    assert engine.check() == []


def test_expire_before_the_deadline_is_not_due_and_changes_nothing(engine):
    task, _lease = claimed(engine)
    before = snapshot(engine, task.id)
    assert call(engine, "expire", task.id, 0.5) == [Code.NOT_DUE]
    assert not engine.sweep().acted
    assert snapshot(engine, task.id) == before


def test_expire_of_a_task_no_longer_processing_is_not_due(engine):
    task, lease = claimed(engine)
    engine.complete(lease, {})
    before = snapshot(engine, task.id)
    assert call(engine, "expire", task.id, 0.5) == [Code.NOT_DUE]
    assert snapshot(engine, task.id) == before


def test_expire_of_a_task_that_does_not_exist_is_not_found(engine):
    assert call(engine, "expire", GHOST, 0.5) == [Code.NOT_FOUND]
    assert engine.redis.keys(f"*{GHOST}*") == []


# -- promote --------------------------------------------------------------------------------------


def test_retry_waiting_task_whose_time_has_come_is_promoted_to_pending_due_now(engine):
    task, lease = claimed(engine)
    engine.fail(lease, "boom")
    at_ms = int(raw_task(engine, task.id)["next_retry_at"])
    wait_for_server_time(engine.redis, at_ms)
    report = engine.sweep()
    assert (report.promoted, report.expired) == (1, 0)
    got, h = engine.get(task.id), raw_task(engine, task.id)
    assert (got.status, got.next_retry_at, got.attempt) == (State.PENDING, None, 1)
    k = engine.keys.task(task.id)
    assert engine.redis.zscore(k.retries, task.id) is None
    assert engine.redis.zscore(k.dispatch, task.id) == int(h["state_since"])  # due for dispatch at once
    assert engine.history(task.id)[-1].verb == "promote"
    assert engine.check() == []


def test_promote_before_the_retry_time_is_not_due_and_changes_nothing(engine):
    engine.task(name="patient", queue="images", backoff=[60])(lambda ctx, **kw: None)
    task, lease = claimed(engine, "patient")
    engine.fail(lease, "boom")
    before = snapshot(engine, task.id)
    assert call(engine, "promote", task.id) == [Code.NOT_DUE]
    assert engine.sweep().promoted == 0
    assert snapshot(engine, task.id) == before


def test_promote_of_a_task_no_longer_waiting_is_not_due(engine):
    task = engine.submit("render", {}, owner="alice")
    before = snapshot(engine, task.id)
    assert call(engine, "promote", task.id) == [Code.NOT_DUE]
    assert snapshot(engine, task.id) == before


def test_promote_of_a_task_that_does_not_exist_is_not_found(engine):
    assert call(engine, "promote", GHOST) == [Code.NOT_FOUND]


# -- purge ----------------------------------------------------------------------------------------


def test_terminal_task_past_its_retention_is_purged_with_all_its_keys(engine):
    short = sibling(engine, config=Config(retention=0.05, idempotency_ttl=0.05))
    task = short.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k1")
    lease = short.claim(task.id, "w1")
    short.checkpoint(lease, "page", 1)
    short.complete(lease, {"url": "x"})
    k = short.keys.task(task.id)
    wait_for_server_time(short.redis, purge_due_ms(short, task.id))
    assert short.sweep().purged == 1
    assert short.get(task.id) is None and short.history(task.id) == [] and short.checkpoints(task.id) == {}
    assert [key for key in short.redis.keys("*") if task.id.encode() in key] == []
    assert short.redis.zscore(k.index, task.id) is None
    assert short.stats()["images"]["counts"]["SUCCESS"] == 0
    assert not short.redis.exists(short.keys.idempotency("images", "alice", "k1"))  # TTL <= retention
    assert short.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k1").id != task.id
    assert short.check() == []


def test_purge_before_the_retention_has_passed_is_not_due_and_changes_nothing(engine):
    task, lease = claimed(engine)
    engine.complete(lease, {})
    before = snapshot(engine, task.id)
    assert call(engine, "purge", task.id, task.id) == [Code.NOT_DUE]
    assert snapshot(engine, task.id) == before


def test_purge_of_a_task_that_has_not_ended_is_not_due(engine):
    task = engine.submit("render", {}, owner="alice")
    before = snapshot(engine, task.id)
    assert call(engine, "purge", task.id, task.id) == [Code.NOT_DUE]
    assert snapshot(engine, task.id) == before


def test_purge_of_a_task_already_gone_is_not_found_and_drops_it_from_the_expiry_set(engine):
    expiry = engine.keys.task(GHOST).expiry
    engine.redis.zadd(expiry, {GHOST: 0})
    assert call(engine, "purge", GHOST, GHOST) == [Code.NOT_FOUND]
    assert engine.redis.zscore(expiry, GHOST) is None


# -- due and the tick -----------------------------------------------------------------------------


def test_due_lists_what_is_due_in_each_set_and_the_time_until_the_earliest_deadline(engine):
    q = engine.keys.task(GHOST)
    assert engine.scripts._call("due", [q.leases, q.retries], [10])[2:] == [[], [], -1]
    _task, _lease = claimed(engine)  # lease deadline in 30 s
    retry_task, retry_lease = claimed(engine)
    engine.fail(retry_lease, "boom")  # retry in 50 ms
    wait_for_server_time(engine.redis, int(raw_task(engine, retry_task.id)["next_retry_at"]))
    reply = engine.scripts._call("due", [q.leases, q.retries], [10])
    assert reply[0] == Code.OK and abs(reply[1] - server_ms(engine.redis)) < 1000
    leases, retries, next_ms = reply[2:]
    assert (leases, retries, next_ms) == ([], [retry_task.id], 0)  # something is already due


def test_due_lists_at_most_a_batch_from_each_set_earliest_deadline_first(engine):
    tasks = [claimed(engine, "quick")[0] for _ in range(3)]
    wait_for_lease_deadline(engine, tasks[-1].id)
    leases = engine.keys.task(tasks[0].id).leases
    by_deadline = [m.decode() for m in engine.redis.zrange(leases, 0, -1)]  # ties: by member
    assert engine.scripts._call("due", [leases], [2])[2] == by_deadline[:2]
    assert sorted(engine.scripts._call("due", [leases], [10])[2]) == sorted(t.id for t in tasks)


def test_sweep_reports_the_time_until_the_next_deadline(engine):
    assert engine.sweep().next_in is None
    _task, _lease = claimed(engine)  # lease deadline in 30 s
    report = engine.sweep()
    assert not report.acted
    assert 29.0 < report.next_in <= 30.0


def test_sweep_with_a_small_batch_still_handles_everything_due(engine):
    tasks = [claimed(engine, "quick")[0] for _ in range(3)]
    wait_for_lease_deadline(engine, tasks[-1].id)
    report = engine.sweep(batch=1)
    assert (report.expired, report.promoted) == (3, 3)
    assert {engine.get(t.id).status for t in tasks} == {State.PENDING}
    assert engine.check() == []


def test_two_sweepers_racing_the_second_gets_nothing(engine):
    second = sibling(engine)
    expiring, _lease = claimed(engine, "quick")
    waiting, failing = claimed(engine)
    engine.fail(failing, "boom")
    wait_for_lease_deadline(engine, expiring.id)
    wait_for_server_time(engine.redis, int(raw_task(engine, waiting.id)["next_retry_at"]))
    q = engine.keys.task(expiring.id)
    _, _, leases, retries, _ = second.scripts._call("due", [q.leases, q.retries], [10])
    assert (leases, retries) == ([expiring.id], [waiting.id])  # both sweepers see the same work

    first = engine.sweep()
    assert (first.expired, first.promoted) == (1, 2)
    before = snapshot(engine, expiring.id, waiting.id)
    # The second acts on what it saw: each compare-and-set is lost.
    assert call(second, "expire", expiring.id, 0.5) == [Code.NOT_DUE]
    assert call(second, "promote", waiting.id) == [Code.NOT_DUE]
    report = second.sweep()
    assert (report.expired, report.promoted, report.purged, report.acted) == (0, 0, 0, False)
    assert snapshot(engine, expiring.id, waiting.id) == before
    assert engine.check() == []


# -- re-dispatch (with an executor) ---------------------------------------------------------------


def test_queued_task_whose_job_was_lost_is_dispatched_again_and_the_old_delivery_refused(engine):
    executor = FakeDispatcher()
    engine = sibling(engine, config=Config(requeue_after=0.05), dispatcher=executor)
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    [old] = executor.dispatches(task.id)
    executor.lose(old)
    wait_for_server_time(engine.redis, engine.redis.zscore(engine.keys.task(task.id).dispatch, task.id))
    report = engine.sweep()
    assert (report.dispatched, report.refreshed) == (1, 0)
    [_, new] = executor.dispatches(task.id)
    assert raw_task(engine, task.id)["dispatch_id"] == new
    assert engine.history(task.id)[-1].reason == "redispatch"
    with pytest.raises(WrongDispatch):
        engine.claim(task.id, "w1", dispatch_id=old)
    assert engine.claim(task.id, "w2", dispatch_id=new).attempt == 1
    assert engine.check() == []


def test_pending_task_never_handed_to_the_executor_is_dispatched_after_the_grace(engine):
    # submitted, then died before dispatching; a grace a loaded host does not run out before the first sweep
    crashed = sibling(engine, config=Config(dispatch_grace=1.0))
    task = crashed.submit("render", {"prompt": "a cat"}, owner="alice")
    executor = FakeDispatcher()
    sweeper = sibling(engine, dispatcher=executor)
    assert sweeper.sweep().dispatched == 0
    wait_for_server_time(engine.redis, engine.redis.zscore(engine.keys.task(task.id).dispatch, task.id))
    assert sweeper.sweep().dispatched == 1
    assert engine.get(task.id).status == State.QUEUED
    assert len(executor.dispatches(task.id)) == 1
    assert engine.check() == []


def test_queued_task_whose_job_still_exists_is_checked_again_only_after_requeue_after(engine):
    executor = FakeDispatcher()
    submitter = sibling(engine, config=Config(requeue_after=0.05), dispatcher=executor)
    sweeper = sibling(engine, config=Config(requeue_after=300), dispatcher=executor)
    task = submitter.submit("render", {"prompt": "a cat"}, owner="alice")
    dispatch_set = engine.keys.task(task.id).dispatch
    wait_for_server_time(engine.redis, engine.redis.zscore(dispatch_set, task.id))
    report = sweeper.sweep()
    assert (report.refreshed, report.dispatched) == (1, 0)
    assert len(executor.dispatches(task.id)) == 1  # the job was not duplicated
    assert engine.redis.zscore(dispatch_set, task.id) >= server_ms(engine.redis) + 290_000
    assert sweeper.sweep().refreshed == 0


@pytest.mark.parametrize("stuck", ["job still exists", "type unknown to this sweeper"])
def test_sweep_with_a_full_batch_of_tasks_it_cannot_move_still_returns(engine, monkeypatch, stuck):
    executor = FakeDispatcher()
    submitter = sibling(
        engine,
        config=Config(requeue_after=0.05, dispatch_grace=0.05),
        dispatcher=executor if stuck == "job still exists" else None,
    )
    sweeper = sibling(engine, dispatcher=executor, types=stuck == "job still exists")
    task = submitter.submit("render", {"prompt": "a cat"}, owner="alice")
    wait_for_server_time(engine.redis, engine.redis.zscore(engine.keys.task(task.id).dispatch, task.id))
    ticks = []
    due = sweeper.scripts.due

    def bounded_due(sets, batch, **kw):  # stands in for a hang: the real loop has no bound
        ticks.append(1)
        if len(ticks) > 20:
            raise RuntimeError("sweep(batch=1) is still looping after 20 rounds")
        return due(sets, batch, **kw)

    monkeypatch.setattr(sweeper.scripts, "due", bounded_due)
    report = sweeper.sweep(batch=1)
    assert report.dispatched == 0


def test_a_sweeper_without_the_tasks_type_says_so_once_and_leaves_it_waiting(engine, caplog, monkeypatch):
    import logging

    import ghostless.core.sweep as sweep_mod

    monkeypatch.setattr(sweep_mod, "_warned_types", set())  # once per process: fresh for this test
    blind = sibling(engine, dispatcher=FakeDispatcher(), types=False)  # started before the type existed
    tasks = [engine.submit("render", {"i": i}, owner="alice", delay=0.01) for i in range(2)]
    wait_for_server_time(engine.redis, max(engine.redis.zscore(engine.keys.task(t.id).dispatch, t.id) for t in tasks))
    with caplog.at_level(logging.WARNING, logger="ghostless.sweeper"):
        assert blind.sweep().dispatched == 0
        blind.sweep()
    warned = [r.getMessage() for r in caplog.records if "does not register the type" in r.getMessage()]
    assert len(warned) == 1 and "'render'" in warned[0]
    assert {engine.get(t.id).status for t in tasks} == {State.PENDING}
