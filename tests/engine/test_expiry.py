"""Expiry (``submit(..., expires_in=)``): a task not started by then ends CANCELLED, reason expired,
recorded once, by the sweeper at its expiry or by a claim that comes first."""

import pytest

from ghostless import IllegalTransition, Rate, RateLimited, State, TaskExpired
from ghostless.core.keys import parse_task_id
from ghostless.core.notify import hand_off
from ghostless.core.streams import read_stream
from tests.support.sweeper import sleeping_sweeper
from tests.support.wait import wait_for_server_time, wait_until

SECRET = "s3cret-for-tests-0123456789"


def expired_at(engine, task_id) -> int:
    return round(engine.get(task_id).expires_at * 1000)


def lapses(engine, task_id) -> list:
    return [e for e in engine.history(task_id) if e.verb == "lapse"]


def stream_lapses(engine, task_id) -> int:
    events = read_stream(engine, parse_task_id(task_id), "-")
    return sum(1 for ev in events if ev.get("verb") == "lapse" and ev["task_id"] == task_id)


def test_the_sweeper_cancels_a_task_not_started_by_its_expiry(engine):
    task = engine.submit("render", {}, owner="alice", expires_in=1.0)
    assert task.expires_at is not None and engine.get(task.id).expires_at == task.expires_at
    assert engine.sweep().lapsed == 0  # not yet
    wait_for_server_time(engine.redis, expired_at(engine, task.id))
    assert engine.sweep().lapsed == 1
    got = engine.get(task.id)
    assert (got.status, got.reason, got.error_kind) == (State.CANCELLED, "expired", "expired")
    [event] = lapses(engine, task.id)
    assert (event.from_, event.to, event.reason) == ("PENDING", "CANCELLED", "expired")
    assert round(event.at * 1000) >= expired_at(engine, task.id)
    assert engine.sweep().lapsed == 0  # recorded once
    assert len(lapses(engine, task.id)) == 1 and stream_lapses(engine, task.id) == 1
    assert engine.check() == []


def test_a_claim_after_the_expiry_cancels_the_task_instead_of_starting_it(engine):
    task = engine.submit("render", {}, owner="alice", expires_in=0.05)
    wait_for_server_time(engine.redis, expired_at(engine, task.id))
    with pytest.raises(TaskExpired) as refused:
        engine.claim(task.id, "w1")
    assert isinstance(refused.value, IllegalTransition)  # a worker's runner ends such a job quietly
    got = engine.get(task.id)
    assert (got.status, got.reason, got.attempt, got.token) == (State.CANCELLED, "expired", 0, 0)
    assert len(lapses(engine, task.id)) == 1
    assert engine.sweep().lapsed == 0  # the sweeper finds nothing left to do
    with pytest.raises(IllegalTransition):
        engine.claim(task.id, "w1")
    assert len(lapses(engine, task.id)) == 1 and engine.check() == []


def test_a_task_started_in_time_never_expires_not_even_while_it_waits_for_a_retry(engine):
    task = engine.submit("render", {}, owner="alice", expires_in=1.0)
    lease = engine.claim(task.id, "w1")
    assert engine.get(task.id).expires_at is None  # started: its expiry no longer applies
    engine.fail(lease, "boom", "flaky")  # RETRY_WAITING for 0.05 s: due before the expiry passes
    wait_for_server_time(engine.redis, round(task.expires_at * 1000))
    engine.sweep()
    assert engine.get(task.id).status == State.PENDING  # promoted, not expired
    assert engine.claim(task.id, "w1").attempt == 2
    assert lapses(engine, task.id) == [] and engine.check() == []


def test_a_released_task_does_not_expire(engine):
    task = engine.submit("render", {}, owner="alice", expires_in=1.0)
    engine.release(engine.claim(task.id, "w1"), "shutdown")
    wait_for_server_time(engine.redis, round(task.expires_at * 1000))
    assert engine.sweep().lapsed == 0
    assert engine.claim(task.id, "w2").attempt == 1


def test_a_task_parked_before_it_ever_started_expires_in_retry_waiting(engine):
    engine.task(name="paint", queue="images", lease=30, upstream="image-model", breaker=False, rate=Rate(1, 60))(
        lambda ctx: None
    )
    engine.claim(engine.submit("paint", {}, owner="alice").id, "w1")  # takes the one start of the minute
    task = engine.submit("paint", {}, owner="alice", expires_in=1.0)
    with pytest.raises(RateLimited) as refused:
        engine.claim(task.id, "w1")
    engine.park(task.id, refused.value.wait, refused.value.upstream, refused.value.kind)
    assert engine.get(task.id).status == State.RETRY_WAITING
    wait_for_server_time(engine.redis, expired_at(engine, task.id))
    assert engine.sweep().lapsed == 1
    [event] = lapses(engine, task.id)
    assert (event.from_, event.to) == ("RETRY_WAITING", "CANCELLED")
    assert engine.check() == []


def test_expires_in_must_leave_time_to_start(engine):
    for bad in (-1, 0, "600", float("nan"), True):
        with pytest.raises(ValueError):
            engine.submit("render", {}, owner="alice", expires_in=bad)
    with pytest.raises(ValueError, match="later than delay"):
        engine.submit("render", {}, owner="alice", delay=10, expires_in=5)
    assert engine.stats()["images"]["counts"]["PENDING"] == 0


def test_an_edit_keeps_the_expiry_of_the_request(engine):
    task = engine.submit("render", {}, owner="alice", expires_in=30)
    new = engine.edit(task.id, {"prompt": "a dog"}, by="alice")
    assert new.expires_at == pytest.approx(task.expires_at, abs=0.002)
    started = engine.submit("render", {}, owner="alice", expires_in=30)
    engine.claim(started.id, "w1")
    assert engine.edit(started.id, {"prompt": "a cat"}, by="alice").expires_at is None
    assert engine.check() == []


def test_tasks_waiting_on_an_expired_task_are_cancelled(engine):
    parent = engine.submit("render", {}, owner="alice", expires_in=0.05)
    child = engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    wait_for_server_time(engine.redis, expired_at(engine, parent.id))
    engine.sweep()
    got = engine.get(child.id)
    assert (got.status, got.reason) == (State.CANCELLED, f"dependency_failed:{parent.id}")


@pytest.mark.parametrize("by", ["sweeper", "claim"])
def test_an_expiry_sends_its_webhook_once(engine, by):
    engine.enable_notifications(SECRET, backoff=[0.01], allow_hosts=["127.0.0.1"])
    task = engine.submit("render", {}, owner="alice", expires_in=0.05, notify_url="https://example.invalid/hook")
    wait_for_server_time(engine.redis, expired_at(engine, task.id))
    if by == "claim":
        with pytest.raises(TaskExpired):
            engine.claim(task.id, "w1")
    engine.sweep()
    engine.sweep()
    assert hand_off(engine, "images") == 0
    [delivery] = engine.notifications(task.id)
    event = delivery.args["event"]
    assert (event["event"], event["status"], event["reason"]) == ("terminal", "CANCELLED", "expired")


def test_a_sleeping_sweeper_is_woken_for_an_expiry_sooner_than_its_next_look(engine):
    with sleeping_sweeper(engine):  # nothing due: it sleeps 60 s
        task = engine.submit("render", {}, owner="alice", expires_in=0.3)
        wait_until(lambda: engine.get(task.id).status == State.CANCELLED, timeout=10, what="the expiry")
    # Woken by the submit's announcement (an expiry within a second), not after its 60 s interval.
    assert engine.get(task.id).finished_at - task.expires_at < 1.0


def test_an_async_submit_expires_as_the_engines_does(engine):
    from tests.support.aio import run_async

    async def body(aengine):
        with pytest.raises(ValueError, match="expires_in must be later than delay"):
            await aengine.submit("render", {}, owner="alice", delay=1, expires_in=1)
        return await aengine.submit("render", {}, owner="alice", expires_in=0.5)

    task = run_async(engine, body)
    assert task.expires_at is not None and engine.get(task.id).expires_at == task.expires_at
    wait_for_server_time(engine.redis, expired_at(engine, task.id))
    assert engine.sweep().lapsed == 1
    got = engine.get(task.id)
    assert (got.status, got.reason) == (State.CANCELLED, "expired")
