"""Due times: the sweeper records overdue, then escalated, once each, for unfinished tasks."""

import pytest

from ghostless import State
from tests.support.wait import wait_for_server_time


def test_an_unfinished_task_is_recorded_overdue_then_escalated_once_each(engine):
    task = engine.submit("render", {}, owner="alice", due_in=0.02, escalate_in=1.0)
    wait_for_server_time(engine.redis, engine.get(task.id).due_at * 1000)
    assert engine.sweep().overdue == 1
    assert engine.sweep().overdue == 0  # once
    got = engine.get(task.id)
    assert got.overdue_at and not got.escalated_at and got.status == State.PENDING
    wait_for_server_time(engine.redis, got.escalate_at * 1000)
    assert engine.sweep().escalated == 1
    assert engine.sweep().escalated == 0
    kinds = [e.kind for e in engine.history(task.id)]
    assert kinds.count("overdue") == 1 and kinds.count("escalated") == 1
    stats = engine.stats()["images"]
    assert (stats["overdue"], stats["escalated"]) == (1, 1)
    assert engine.check() == []


def test_a_task_with_only_an_escalation_time_is_escalated_when_it_passes(engine):
    task = engine.submit("render", {}, owner="alice", escalate_in=0.02)
    wait_for_server_time(engine.redis, engine.get(task.id).escalate_at * 1000)
    report = engine.sweep()
    assert (report.overdue, report.escalated) == (0, 1)
    got = engine.get(task.id)
    assert got.escalated_at and not got.overdue_at
    assert engine.check() == []


def test_a_retried_task_is_watched_again_for_the_times_it_had_not_passed(engine):
    task = engine.submit("render", {}, owner="alice", due_in=0.05, escalate_in=0.1)
    engine.fail(engine.claim(task.id, "w1"), "bad_prompt", "no", retryable=False)  # ended in time
    engine.retry(task.id, by="alice")
    wait_for_server_time(engine.redis, engine.get(task.id).escalate_at * 1000)
    assert (engine.sweep().overdue, engine.sweep().escalated) == (1, 1)
    got = engine.get(task.id)
    assert got.overdue_at and got.escalated_at and got.status == State.PENDING
    assert engine.check() == []


def test_an_edit_of_an_overdue_request_is_not_recorded_overdue_again(engine):
    task = engine.submit("render", {"prompt": "a"}, owner="alice", due_in=0.02)
    wait_for_server_time(engine.redis, engine.get(task.id).due_at * 1000)
    assert engine.sweep().overdue == 1
    new = engine.edit(task.id, {"prompt": "b"}, by="alice")
    assert new.overdue_at == engine.get(task.id).overdue_at
    assert engine.sweep().overdue == 0 and engine.stats()["images"]["overdue"] == 1
    assert engine.check() == []


def test_a_task_that_ends_in_time_is_never_overdue(engine):
    task = engine.submit("render", {}, owner="alice", due_in=0.02)
    engine.complete(engine.claim(task.id, "w1"), {})
    wait_for_server_time(engine.redis, engine.get(task.id).due_at * 1000)
    assert engine.sweep().overdue == 0
    assert engine.redis.zcard(engine.keys.task(task.id).watch) == 0


def test_an_edit_keeps_the_due_time_of_the_request(engine):
    old = engine.submit("render", {"prompt": "a"}, owner="alice", due_in=60)
    new = engine.edit(old.id, {"prompt": "b"}, by="alice")
    assert new.due_at == engine.get(old.id).due_at


@pytest.mark.parametrize("kw", [{"due_in": -1}, {"due_in": 10, "escalate_in": 5}, {"escalate_in": "soon"}])
def test_bad_due_times_are_value_errors(engine, kw):
    with pytest.raises(ValueError):
        engine.submit("render", {}, owner="alice", **kw)


def test_a_timeout_that_is_retried_keeps_the_due_time_watch_and_sends_no_terminal_webhook(engine):
    from tests.support.wait import wait_for_server_time

    engine.enable_notifications("s3cret-for-tests-0123456789")
    task = engine.submit("quick", {}, owner="alice", due_in=5, notify_url="https://example.invalid/h")
    lease = engine.claim(task.id, "w1")
    wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000)
    engine.sweep()
    assert engine.get(task.id).status in (State.RETRY_WAITING, State.PENDING)  # TIMEOUT was passed through
    assert engine.redis.zscore(engine.keys.task(task.id).watch, task.id) is not None
    assert engine.redis.llen(engine.keys.queue_key("images", "outbox")) == 0
    assert lease.attempt == 1 and engine.check() == []
