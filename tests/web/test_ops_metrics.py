"""The metrics operators alert on (web/ops_metrics.py) and ``/readyz``'s sweeper check, with values
a user relies on: ages that grow with Redis time, histogram buckets after lifecycles of known
durations, live sweepers and workers."""

from __future__ import annotations

import threading
import uuid

import pytest

from ghostless.core.sweep import run_sweeper
from ghostless.core.sweepers import KEEP, record_tick
from tests.support.wait import server_ms, wait_for_server_time, wait_until

from .test_metrics import scrape, value

INF = float("inf")


@pytest.fixture
def http(make_app):
    return make_app(GHOSTLESS_METRICS_PUBLIC=True).test_client()


def dispatched(engine, task_id: str) -> None:
    """PENDING -> QUEUED, as the executor's dispatch would (these engines have none)."""
    keys = engine.keys.task(task_id)
    engine.scripts.dispatch(keys, engine.keys.queue_key("images", "control"), task_id, uuid.uuid4().hex, 300_000)


def buckets(samples: dict, name: str, queue: str = "images") -> dict[float, float]:
    """{upper bound: cumulative count} of one histogram."""
    return {
        float(dict(labels)["le"]): v
        for (sample, labels), v in samples.items()
        if sample == f"{name}_bucket" and dict(labels)["queue"] == queue
    }


# -- oldest waiting task ----------------------------------------------------------------------------
def test_oldest_pending_age_grows_with_redis_time(http, engine):
    task = engine.submit("render", {}, owner="alice")
    submitted = task.created_at * 1000
    young = value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="PENDING")
    assert young <= (server_ms(engine.redis) - submitted) / 1000  # bound read after the scrape, however slow
    wait_for_server_time(engine.redis, submitted + 300)
    age = value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="PENDING")
    assert 0.3 <= age <= (server_ms(engine.redis) - submitted) / 1000
    assert value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="QUEUED") == 0


def test_the_oldest_is_the_first_submitted_and_a_claim_takes_it_out(http, engine):
    first = engine.submit("render", {}, owner="alice")
    wait_for_server_time(engine.redis, first.created_at * 1000 + 200)
    second = engine.submit("render", {}, owner="alice")
    age = value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="PENDING")
    assert age >= 0.2
    engine.claim(first.id, "w1")
    after = value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="PENDING")
    assert after < age  # now the second's
    engine.claim(second.id, "w1")
    assert value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="PENDING") == 0


def test_a_queued_task_keeps_the_age_of_its_whole_wait(http, engine):
    task = engine.submit("render", {}, owner="alice")
    wait_for_server_time(engine.redis, task.created_at * 1000 + 200)
    dispatched(engine, task.id)
    m = scrape(http, {})
    assert value(m, "ghostless_oldest_task_age_seconds", queue="images", state="PENDING") == 0
    assert value(m, "ghostless_oldest_task_age_seconds", queue="images", state="QUEUED") >= 0.2
    engine.cancel(task.id, by="alice")
    assert value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="QUEUED") == 0


def test_delayed_tasks_and_tasks_waiting_on_parents_are_not_waiting_for_a_worker_yet(http, engine):
    engine.submit("render", {}, owner="alice", delay=3600)
    parent = engine.submit("render", {}, owner="alice")
    engine.claim(parent.id, "w1")
    engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    assert value(scrape(http, {}), "ghostless_oldest_task_age_seconds", queue="images", state="PENDING") == 0


# -- queue wait and run time histograms --------------------------------------------------------------
def test_wait_and_run_histograms_count_each_lifecycle_in_its_bucket(http, engine):
    slow_start = engine.submit("render", {}, owner="alice")
    wait_for_server_time(engine.redis, slow_start.created_at * 1000 + 600)  # waits 0.6 s: the 1 s bucket
    engine.complete(engine.claim(slow_start.id, "w1"), {})  # runs at once: the 0.1 s bucket
    slow_run = engine.submit("render", {}, owner="alice")
    lease = engine.claim(slow_run.id, "w1")  # claimed at once
    wait_for_server_time(engine.redis, engine.get(slow_run.id).started_at * 1000 + 600)
    engine.complete(lease, {})

    m = scrape(http, {})
    for name in ("ghostless_queue_wait_seconds", "ghostless_run_seconds"):
        b = buckets(m, name)
        assert (b[0.1], b[0.5], b[1.0], b[21600.0], b[INF]) == (1, 1, 2, 2, 2), name
        assert value(m, f"{name}_count", queue="images") == 2
    t1, t2 = engine.get(slow_start.id), engine.get(slow_run.id)
    assert value(m, "ghostless_run_seconds_sum", queue="images") == pytest.approx(
        (t1.finished_at - t1.started_at) + (t2.finished_at - t2.started_at), abs=0.002
    )
    assert value(m, "ghostless_queue_wait_seconds_sum", queue="images") >= 0.6


def test_every_attempt_counts_its_run_and_a_released_task_waits_again(http, engine):
    task = engine.submit("render", {}, owner="alice")
    engine.release(engine.claim(task.id, "w1"), "shutdown")  # back to PENDING: a new wait
    engine.fail(engine.claim(task.id, "w2"), "boom", "flaky")
    m = scrape(http, {})
    assert value(m, "ghostless_run_seconds_count", queue="images") == 2
    assert value(m, "ghostless_queue_wait_seconds_count", queue="images") == 2


def test_hours_long_runs_land_in_the_hour_buckets(http, engine):
    task = engine.submit("render", {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    # As if claimed 1.5 h ago (no test waits that long): run time is measured from state_since.
    engine.redis.hset(engine.keys.task(task.id).task, "state_since", server_ms(engine.redis) - 5400_000)
    engine.complete(lease, {})
    b = buckets(scrape(http, {}), "ghostless_run_seconds")
    assert (b[3600.0], b[7200.0], b[INF]) == (0, 1, 1)


def test_a_queue_without_attempts_has_empty_histograms(http, engine):
    engine.submit("render", {}, owner="alice")
    m = scrape(http, {})
    assert set(buckets(m, "ghostless_run_seconds").values()) == {0}
    assert value(m, "ghostless_run_seconds_count", queue="images") == 0


# -- sweepers and readiness ---------------------------------------------------------------------------
def test_without_a_sweeper_the_freshest_tick_is_infinitely_old_and_readyz_is_not_ready(make_app, engine):
    http = make_app(GHOSTLESS_METRICS_PUBLIC=True, GHOSTLESS_READY_SWEEPER_AGE=30).test_client()
    assert value(scrape(http, {}), "ghostless_sweeper_freshest_tick_age_seconds") == INF
    r = http.get("/readyz")
    assert r.status_code == 503
    assert r.get_json()["error"]["code"] == "no_sweeper"
    assert "no sweeper has ever ticked" in r.get_json()["error"]["message"]


def test_a_running_sweeper_makes_readyz_ready_and_is_listed_by_name(make_app, engine):
    http = make_app(GHOSTLESS_METRICS_PUBLIC=True, GHOSTLESS_READY_SWEEPER_AGE=30).test_client()
    stop = threading.Event()
    thread = threading.Thread(target=run_sweeper, args=(engine,), kwargs={"stop": stop, "name": "box.42"})
    thread.start()
    try:
        wait_until(lambda: http.get("/readyz").status_code == 200, what="a ready /readyz")
        m = scrape(http, {})
        assert value(m, "ghostless_sweeper_last_tick_age_seconds", sweeper="box.42") < 5
        assert value(m, "ghostless_sweeper_freshest_tick_age_seconds") < 5
        assert http.get("/readyz").get_json()["sweeper_age"] < 5
    finally:
        stop.set()
        thread.join(10)


def test_readyz_is_not_ready_once_the_last_tick_is_older_than_the_limit(make_app, engine):
    # a limit a loaded host's pause between the tick and the first look does not outlast
    http = make_app(GHOSTLESS_METRICS_PUBLIC=True, GHOSTLESS_READY_SWEEPER_AGE=1.0).test_client()
    at = record_tick(engine, "box.1")
    assert http.get("/readyz").status_code == 200
    wait_for_server_time(engine.redis, at + 1100)
    r = http.get("/readyz")
    assert (r.status_code, r.get_json()["error"]["code"]) == (503, "no_sweeper")
    assert "the last sweeper tick was" in r.get_json()["error"]["message"]
    age = value(scrape(http, {}), "ghostless_sweeper_last_tick_age_seconds", sweeper="box.1")
    assert age >= 1.1


def test_the_freshest_is_the_youngest_sweeper_and_silent_ones_drop_out(http, engine):
    key, now = engine.keys.sweepers(), server_ms(engine.redis)
    engine.redis.zadd(key, {"old.1": now - 5000, "gone.2": now - KEEP * 1000 - 1})
    record_tick(engine, "new.3")
    m = scrape(http, {})
    assert value(m, "ghostless_sweeper_last_tick_age_seconds", sweeper="old.1") >= 5
    assert value(m, "ghostless_sweeper_freshest_tick_age_seconds") < 1
    assert not any(dict(labels).get("sweeper") == "gone.2" for _, labels in m)
    assert engine.redis.ttl(key) > 0  # the registry expires once every sweeper is silent


# -- workers ------------------------------------------------------------------------------------------
def test_live_workers_are_counted_per_queue_from_rqs_registry(redis_client):
    from ghostless import Engine
    from ghostless.execution.worker import build_worker
    from ghostless.web import close_app, create_app
    from tests.conftest import register_test_types

    from .conftest import TEST_CONFIG

    engine = register_test_types(Engine(redis_client, namespace="t"))  # the RQ executor
    app = create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine, "GHOSTLESS_METRICS_PUBLIC": True})
    try:
        http = app.test_client()
        engine.submit("render", {}, owner="alice")
        assert value(scrape(http, {}), "ghostless_workers", queue="images") == 0
        workers = [build_worker(engine, ["images"], "simple", name=f"w{i}") for i in range(2)]
        workers.append(build_worker(engine, ["other"], "simple", name="w-other"))
        for w in workers:
            w.register_birth()
        m = scrape(http, {})
        assert (value(m, "ghostless_workers", queue="images"), value(m, "ghostless_workers", queue="other")) == (2, 1)
        workers[0].register_death()
        assert value(scrape(http, {}), "ghostless_workers", queue="images") == 1
    finally:
        close_app(app)
