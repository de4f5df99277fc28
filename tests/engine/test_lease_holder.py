"""heartbeat.lua, stage.lua, progress.lua, checkpoint.lua: the lease holder's calls inside PROCESSING.

One test per return code of each script; the fencing contract (a stale token is refused,
counted, recorded as "stale" and changes nothing else) for each of them.
"""

import pytest

from ghostless import LeaseLost, State, TaskCancelled, TaskNotFound
from ghostless.core.errors import AttemptEnded
from ghostless.core.streams import stream_event
from tests.support.snapshots import (
    HOLDER_CALLS,
    assert_only_stale_recorded,
    claimed,
    ghost_lease,
    queue_snapshot,
    raw_task,
    reclaimed,
    snapshot,
)
from tests.support.wait import server_ms, wait_for_server_time

VERBS = ["heartbeat", "stage", "progress", "checkpoint"]
ALL_VERBS = VERBS + ["complete", "fail", "release"]  # every call that carries the lease


# -- heartbeat ------------------------------------------------------------------------------------


def test_heartbeat_extends_the_lease_from_server_now(engine):
    task, lease = claimed(engine)
    h = raw_task(engine, task.id)
    wait_for_server_time(engine.redis, int(h["started_at"]))  # so "later" is measurable
    before_ms = server_ms(engine.redis)
    remaining = engine.heartbeat(lease)
    after_ms = server_ms(engine.redis)
    h2 = raw_task(engine, task.id)
    assert before_ms + 30_000 <= int(h2["lease_until"]) <= after_ms + 30_000
    assert int(h2["lease_until"]) > int(h["lease_until"])
    assert 29.0 < remaining <= 30.0
    k = engine.keys.task(task.id)
    assert engine.redis.zscore(k.leases, task.id) == int(h2["lease_until"])
    # Not an event: nothing a watcher sees changes.
    assert h2["version"] == h["version"] and len(engine.history(task.id)) == 2
    assert engine.check() == []


def test_heartbeat_reports_the_time_until_the_earliest_deadline_not_the_lease(engine):
    task, lease = claimed(engine, "brief")  # lease 30 s, attempt timeout 50 ms
    remaining = engine.heartbeat(lease)
    assert remaining <= 0.05
    assert engine.redis.zscore(engine.keys.task(task.id).leases, task.id) == int(
        raw_task(engine, task.id)["attempt_deadline"]
    )
    assert engine.check() == []


# -- stage ----------------------------------------------------------------------------------------


def test_entering_a_stage_records_it_and_its_deadline_joins_the_lease_deadline(engine):
    engine.task(name="staged", queue="images", lease=30, stages={"fast": 0.5, "open": 0})(lambda ctx, **kw: None)
    task, lease = claimed(engine, "staged")
    engine.stage(lease, "fast")
    got, h = engine.get(task.id), raw_task(engine, task.id)
    assert (got.stage, got.version) == ("fast", 3)
    assert int(h["stage_deadline"]) - int(h["stage_since"]) == 500
    k = engine.keys.task(task.id)
    assert engine.redis.zscore(k.leases, task.id) == int(h["stage_deadline"]) == got.lease_deadline * 1000
    event = engine.history(task.id)[-1]
    assert (event.kind, event.stage, event.attempt, event.worker) == ("stage", "fast", 1, "w1")
    engine.stage(lease, "open")  # no deadline of its own: the lease deadline rules again
    h = raw_task(engine, task.id)
    assert h["stage_deadline"] == "0"
    assert engine.redis.zscore(k.leases, task.id) == int(h["lease_until"])
    assert engine.history(task.id)[-1].extra["from_stage"] == "fast"
    assert "fast" in engine.stats()["images"]["time_in_stage"]
    assert engine.check() == []


def test_entering_the_stage_the_task_is_in_is_replayed_and_changes_nothing(engine):
    task, lease = claimed(engine)
    engine.stage(lease, "generating")
    before = snapshot(engine, task.id)
    engine.stage(lease, "generating")
    assert snapshot(engine, task.id) == before


# -- progress -------------------------------------------------------------------------------------


def test_progress_is_stored_and_streamed_but_kept_out_of_history(engine):
    task, lease = claimed(engine)
    events = queue_snapshot(engine, "images")["events"]
    engine.progress(lease, 0.25, "a quarter")
    got = engine.get(task.id)
    assert (got.progress, got.message, got.version) == (0.25, "a quarter", 3)
    assert [e.kind for e in engine.history(task.id)] == ["transition", "transition"]
    assert queue_snapshot(engine, "images")["events"] == events + 1
    [(sid, last)] = engine.redis.xrevrange(engine.keys.task(task.id).events, count=1)
    ev = stream_event(task.queue, sid, last)
    assert ev["kind"] == "progress" and ev["progress"] == 0.25
    assert engine.check() == []


def test_progress_repeating_fraction_and_message_is_replayed_and_changes_nothing(engine):
    task, lease = claimed(engine)
    engine.progress(lease, 0.5, "half")
    before = snapshot(engine, task.id)
    engine.progress(lease, 0.5, "half")
    assert snapshot(engine, task.id) == before


# -- checkpoint -----------------------------------------------------------------------------------


def test_checkpoint_is_kept_for_the_next_attempt(engine):
    task, lease = claimed(engine)
    version = engine.get(task.id).version
    engine.checkpoint(lease, "page", {"n": 3})
    assert engine.checkpoints(task.id) == {"page": {"n": 3}}
    assert engine.get(task.id).version == version
    engine.release(lease)
    later = engine.claim(task.id, "w2")
    engine.checkpoint(later, "page", {"n": 4})
    assert engine.checkpoints(task.id) == {"page": {"n": 4}}
    assert engine.check() == []


# -- every lease-holder call, ending ones too: NOT_FOUND, LEASE_LOST (fencing), CANCELLED------------------------


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_holder_call_on_a_task_that_does_not_exist_is_task_not_found(engine, verb):
    with pytest.raises(TaskNotFound):
        HOLDER_CALLS[verb](engine, ghost_lease())
    assert engine.redis.keys("*0123456789abcdef0123*") == []


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_holder_call_with_a_stale_token_is_refused_counted_and_recorded_and_changes_nothing_else(engine, verb):
    task, stale, current = reclaimed(engine)
    before = snapshot(engine, task.id)
    with pytest.raises(LeaseLost) as err:
        HOLDER_CALLS[verb](engine, stale)
    assert type(err.value) is LeaseLost
    assert (err.value.task_id, err.value.token, err.value.state) == (task.id, 1, State.PROCESSING)
    assert_only_stale_recorded(engine, before, task.id, verb, stale.token)
    engine.heartbeat(current)  # the current holder is unaffected
    assert engine.check() == []


@pytest.mark.parametrize("verb", [v for v in VERBS if v != "heartbeat"])  # heartbeat: below
def test_holder_call_after_the_task_ended_is_lease_lost(engine, verb):
    task, lease = claimed(engine)
    engine.complete(lease, {"done": True})
    before = snapshot(engine, task.id)
    with pytest.raises(LeaseLost) as err:
        HOLDER_CALLS[verb](engine, lease)
    assert err.value.state == State.SUCCESS
    assert_only_stale_recorded(engine, before, task.id, verb, lease.token)


ENDINGS = {
    "complete": (lambda e, lease: e.complete(lease, {"done": True}), State.SUCCESS),
    "fail": (lambda e, lease: e.fail(lease, "boom", "it broke"), State.RETRY_WAITING),
    "fail-for-good": (lambda e, lease: e.fail(lease, "boom", "it broke", retryable=False), State.FAILED),
    "release": (lambda e, lease: e.release(lease, "shutdown"), State.PENDING),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_heartbeat_arriving_after_its_own_attempt_ended_is_refused_quietly(engine, ending):
    # A heartbeat still in flight as the worker reports the outcome: not a stale holder.
    end, state = ENDINGS[ending]
    task, lease = claimed(engine)
    end(engine, lease)
    before = snapshot(engine, task.id)
    with pytest.raises(AttemptEnded) as err:
        engine.heartbeat(lease)
    assert (err.value.task_id, err.value.token, err.value.state) == (task.id, lease.token, state)
    assert snapshot(engine, task.id) == before  # not counted, not in history nor the stream
    assert engine.stats()["images"]["stale_rejections"] == 0
    assert engine.check() == []


def test_a_heartbeat_of_an_older_attempt_is_still_refused_counted_and_recorded(engine):
    task, first, second = reclaimed(engine)  # the first attempt ended (released) before the second
    engine.complete(second, {"done": True})
    before = snapshot(engine, task.id)
    with pytest.raises(LeaseLost) as err:
        engine.heartbeat(first)
    assert type(err.value) is LeaseLost and err.value.state == State.SUCCESS
    assert_only_stale_recorded(engine, before, task.id, "heartbeat", first.token)


@pytest.mark.parametrize("verb", ALL_VERBS)
def test_holder_call_on_a_task_cancelled_under_it_is_task_cancelled(engine, verb):
    task, lease = claimed(engine)
    engine.cancel(task.id, by="alice")
    before = snapshot(engine, task.id)
    with pytest.raises(TaskCancelled) as err:
        HOLDER_CALLS[verb](engine, lease)
    assert (err.value.task_id, err.value.token, err.value.state) == (task.id, lease.token, "CANCELLED")
    assert_only_stale_recorded(engine, before, task.id, verb, lease.token)
    assert engine.checkpoints(task.id) == {}
    assert engine.check() == []
