"""Circuit breakers: counted by complete/fail, checked by claim, parked tasks keep their attempts."""

import pytest

from ghostless import Breaker, BreakerOpen, State
from ghostless.core.streams import read_stream
from tests.support.wait import wait_for_server_time


def register(engine, policy="park", upstream="image-model"):
    # a cooldown that outlasts a loaded host's pause between a trip and the claim that must meet it open
    breaker = Breaker(threshold=0.5, min_calls=4, window=60, cooldown=1.0, policy=policy)
    for name in ("paint", "sketch"):  # two types, one upstream: one breaker
        engine.task(
            name=name, queue="images", lease=30, max_attempts=5, backoff=[0.01], breaker=breaker, upstream=upstream
        )(lambda ctx, **kw: None)
    return engine


def run_once(engine, ok: bool, type="paint", kind="UpstreamTimeout"):
    task = engine.submit(type, {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    engine.complete(lease, {}) if ok else engine.fail(lease, kind, "model API timed out")
    return task.id


def trip(engine):
    for ok in (True, False, False, False):
        run_once(engine, ok)


def test_breaker_opens_when_the_failure_ratio_crosses_the_threshold(engine):
    register(engine)
    run_once(engine, True)
    run_once(engine, False)
    run_once(engine, False)
    assert engine.breakers()[0]["state"] == "closed"  # 3 calls: under min_calls
    run_once(engine, False)
    [row] = engine.breakers()
    assert (row["state"], row["upstream"], row["calls"], row["failures"]) == ("open", "image-model", 4, 3)


def test_claim_while_open_is_refused_and_the_parked_task_keeps_its_attempts(engine):
    register(engine)
    trip(engine)
    task = engine.submit("sketch", {}, owner="alice")  # the other type of the same upstream
    with pytest.raises(BreakerOpen) as refused:
        engine.claim(task.id, "w1")
    assert refused.value.upstream == "image-model" and 0 < refused.value.wait <= 1.0
    assert engine.get(task.id).status == State.PENDING  # the refused claim changed nothing
    assert engine.park(task.id, refused.value.wait, refused.value.upstream) == State.RETRY_WAITING
    parked = engine.get(task.id)
    assert (parked.attempt, parked.error_kind) == (0, "upstream_open")
    assert parked.reason == "upstream_open: image-model"
    assert engine.check() == []


def test_after_the_cooldown_one_probe_goes_through_and_its_success_closes_the_breaker(engine):
    register(engine)
    trip(engine)
    wait_for_server_time(engine.redis, engine.breakers()[0]["open_until"] * 1000)
    probe, other = (engine.submit("paint", {}, owner="alice").id for _ in range(2))
    lease = engine.claim(probe, "w1")
    assert engine.breakers()[0]["state"] == "half_open"
    with pytest.raises(BreakerOpen):
        engine.claim(other, "w2")  # waits for the probe
    engine.complete(lease, {})
    assert engine.breakers()[0]["state"] == "closed"
    engine.complete(engine.claim(other, "w2"), {})


def test_a_failed_probe_opens_the_breaker_again(engine):
    register(engine)
    trip(engine)
    wait_for_server_time(engine.redis, engine.breakers()[0]["open_until"] * 1000)
    probe = engine.submit("paint", {}, owner="alice").id
    engine.fail(engine.claim(probe, "w1"), "UpstreamTimeout", "still down")
    assert engine.breakers()[0]["state"] == "open"


def test_fail_fast_policy_fails_the_parked_task_at_once(engine):
    register(engine, policy="fail")
    trip(engine)
    task = engine.submit("paint", {}, owner="alice")
    with pytest.raises(BreakerOpen) as refused:
        engine.claim(task.id, "w1")
    assert engine.park(task.id, refused.value.wait, refused.value.upstream) == State.FAILED
    assert engine.get(task.id).error_kind == "upstream_open"


def test_permanent_errors_and_lost_workers_do_not_count_against_the_upstream(engine):
    register(engine)
    for _ in range(4):
        task = engine.submit("paint", {}, owner="alice")
        engine.fail(engine.claim(task.id, "w1"), "bad_prompt", "refused", retryable=False)
        task = engine.submit("paint", {}, owner="alice")
        engine.fail(engine.claim(task.id, "w1"), "worker_lost", "SIGKILL", retry_in=0)
    assert engine.breakers()[0]["calls"] == 0 and engine.breakers()[0]["state"] == "closed"


def test_breaker_changes_are_events_on_the_queue_stream(engine):
    register(engine)
    trip(engine)
    kinds = [(ev["kind"], ev.get("state"), ev.get("upstream")) for ev in read_stream(engine, "images", "-")]
    assert ("breaker", "open", "image-model") in kinds


def test_types_without_a_breaker_are_not_affected(engine):
    register(engine)
    trip(engine)
    task = engine.submit("render", {"prompt": "x"}, owner="alice")
    engine.complete(engine.claim(task.id, "w1"), {})
    assert engine.get(task.id).status == State.SUCCESS
