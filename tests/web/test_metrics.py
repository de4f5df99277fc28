"""``/metrics`` (web/metrics.py): who may scrape it, and every family's values against the engine."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ghostless import Breaker, LeaseLost, RateLimited, State
from tests.support.wait import wait_for_server_time

from .helpers import task_in


def scrape(client, headers) -> dict:
    """{(sample name, frozenset(labels)): value} of one scrape."""
    r = client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.get_data(as_text=True)
    assert r.content_type.startswith("text/plain; version=")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.get_data(as_text=True))
        for s in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.mark.parametrize("caller, status", [("none", 401), ("alice", 403), ("root", 200)])
def test_metrics_are_for_admins_by_default(client, auth, caller, status):
    assert client.get("/metrics", headers=auth[caller]).status_code == status


def test_the_scraper_uses_its_own_token(make_app, auth):
    client = make_app(GHOSTLESS_METRICS_TOKEN="scrape-secret-123").test_client()
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-secret-123"}).status_code == 200
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-secret-999"}).status_code == 401
    assert client.get("/metrics").status_code == 401


def test_metrics_can_be_made_public(make_app):
    assert make_app(GHOSTLESS_METRICS_PUBLIC=True).test_client().get("/metrics").status_code == 200


def test_metrics_read_the_env_settings(monkeypatch, make_app):
    monkeypatch.setenv("GHOSTLESS_METRICS_TOKEN", "from-env-token")
    client = make_app().test_client()
    assert client.get("/metrics", headers={"Authorization": "Bearer from-env-token"}).status_code == 200


def test_counts_transitions_and_failures_match_the_engine(client, engine, auth):
    for state in (State.PENDING, State.SUCCESS, State.SUCCESS, State.FAILED, State.RETRY_WAITING, State.TIMEOUT):
        task_in(engine, state)
    m = scrape(client, auth["root"])
    stats = engine.stats()
    for queue, st in stats.items():
        for state in State:
            assert value(m, "ghostless_tasks", queue=queue, state=state.value) == st["counts"][state.value]
            assert value(m, "ghostless_transitions_total", queue=queue, state=state.value) == st["entered"][state.value]
    assert value(m, "ghostless_tasks", queue="images", state="SUCCESS") == 2
    assert value(m, "ghostless_transitions_total", queue="images", state="PROCESSING") == 4
    assert value(m, "ghostless_failures_total", queue="images", error_kind="boom") == 2
    assert value(m, "ghostless_failures_total", queue="other", error_kind="timeout") == 1


def test_time_in_state_is_a_summary_of_seconds(client, engine, auth):
    task = task_in(engine, State.SUCCESS)
    m = scrape(client, auth["root"])
    assert value(m, "ghostless_time_in_state_seconds_count", queue="images", state="PROCESSING") == 1
    spent = engine.get(task.id).finished_at - engine.get(task.id).started_at
    assert value(m, "ghostless_time_in_state_seconds_sum", queue="images", state="PROCESSING") == pytest.approx(
        spent, abs=0.002
    )
    mean = engine.stats()["images"]["time_in_state"]["PENDING"]
    assert value(m, "ghostless_time_in_state_seconds_sum", queue="images", state="PENDING") / value(
        m, "ghostless_time_in_state_seconds_count", queue="images", state="PENDING"
    ) == pytest.approx(mean)


def test_stale_refusals_and_what_the_sweeper_recorded_are_counted(client, engine, auth):
    lease = engine.claim(engine.submit("render", {}, owner="alice").id, "w1")
    engine.reclaim(lease.task_id, by="root")
    with pytest.raises(LeaseLost):
        engine.heartbeat(lease)
    task = engine.submit("render", {}, owner="alice", due_in=0.02, escalate_in=0.04)
    for at in ("due_at", "escalate_at"):  # the sweeper records each once, in turn
        wait_for_server_time(engine.redis, getattr(engine.get(task.id), at) * 1000)
        engine.sweep()
    m = scrape(client, auth["root"])
    for name, expected in (("stale_rejections", 1), ("overdue", 1), ("escalated", 1), ("parked", 0)):
        assert value(m, f"ghostless_{name}_total", queue="images") == expected == engine.stats()["images"][name]


def test_breaker_state_is_0_closed_1_half_open_2_open(client, engine, auth):
    @engine.task(
        name="call_model",
        queue="models",
        upstream="model-api",
        breaker=Breaker(threshold=0.5, min_calls=1, window=60, cooldown=0.05),
    )
    def call_model(ctx):  # pragma: no cover - never run
        return None

    def breaker_value():
        return value(scrape(client, auth["root"]), "ghostless_breaker_state", queue="models", upstream="model-api")

    assert breaker_value() == 0
    first = engine.submit("call_model", {}, owner="alice")
    engine.fail(engine.claim(first.id, "w1"), "upstream", "model API timed out")
    assert breaker_value() == 2
    [row] = engine.breakers()
    wait_for_server_time(engine.redis, row["open_until"] * 1000)
    engine.claim(engine.submit("call_model", {}, owner="alice").id, "w1")  # the probe
    assert engine.breakers()[0]["state"] == "half_open" and breaker_value() == 1


def test_draining_queues_are_flagged(client, engine, auth):
    task_in(engine, State.PENDING)
    engine.drain("images")
    m = scrape(client, auth["root"])
    assert value(m, "ghostless_queue_draining", queue="images") == 1
    assert value(m, "ghostless_queue_draining", queue="other") == 0


def test_rate_limits_show_their_limit_starts_in_the_window_and_parked_tasks(client, engine, auth):
    @engine.task(name="paint", queue="models", upstream="image-model", breaker=False, rate="2/min")
    def paint(ctx):  # pragma: no cover - never run
        return None

    tasks = [engine.submit("paint", {}, owner="alice") for _ in range(3)]
    for t in tasks[:2]:
        engine.claim(t.id, "w1")
    with pytest.raises(RateLimited) as refused:
        engine.claim(tasks[2].id, "w1")
    engine.park(tasks[2].id, refused.value.wait, refused.value.upstream, refused.value.kind)
    m = scrape(client, auth["root"])
    labels = {"queue": "models", "upstream": "image-model"}
    assert value(m, "ghostless_rate_limit", **labels) == 2
    assert value(m, "ghostless_rate_limit_window_seconds", **labels) == 60
    assert value(m, "ghostless_rate_limit_used", **labels) == 2
    assert value(m, "ghostless_rate_limit_available", **labels) == 0
    assert value(m, "ghostless_rate_limit_waiting", **labels) == 1
    assert value(m, "ghostless_rate_limit_parked_total", **labels) == 1
    assert value(m, "ghostless_parked_total", queue="models") == 1
