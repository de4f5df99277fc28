"""The JSON API (web/api.py, web/health.py, web/errors.py), called as the tasks' owner."""

from __future__ import annotations

import json
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from rq import Worker

from ghostless import Engine, State
from ghostless.core.app import AppError
from ghostless.core.lua_source import SCRIPTS
from ghostless.execution.rq_dispatch import RQDispatcher
from ghostless.web import create_app
from tests.support.lua import forget_lua, loaded
from tests.support.redis_server import free_port
from tests.support.wait import wait_for_server_time, wait_until

from .conftest import TEST_CONFIG
from .helpers import GHOST, task_in, when_subscribed

RENDER = {"type": "render", "args": {"prompt": "a cat"}}


def submit(client, headers, **body):
    return client.post("/api/tasks", json={**RENDER, **body}, headers=headers)


def error_code(response) -> str:
    return response.get_json()["error"]["code"]


# -- submit ---------------------------------------------------------------------------------------
def test_submit_creates_a_pending_task_owned_by_the_caller(client, auth, engine):
    r = submit(client, auth["alice"], priority=3)
    assert r.status_code == 201
    task = r.get_json()["task"]
    assert (task["status"], task["owner"], task["type"], task["args"], task["priority"]) == (
        "PENDING",
        "alice",
        "render",
        {"prompt": "a cat"},
        3,
    )
    assert engine.get(task["id"]).owner == "alice"


def test_submit_with_expires_in_gives_the_task_an_expiry(client, auth, engine):
    task = submit(client, auth["alice"], expires_in=600).get_json()["task"]
    assert task["expires_at"] == pytest.approx(task["created_at"] + 600, abs=0.002)
    assert engine.get(task["id"]).expires_at == task["expires_at"]


def test_submit_with_a_used_idempotency_key_returns_the_same_task_with_200(client, auth):
    first = submit(client, auth["alice"], idempotency_key="req-42")
    again = submit(client, auth["alice"], idempotency_key="req-42")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["task"]["id"] == first.get_json()["task"]["id"]


def test_idempotency_keys_are_scoped_to_the_caller(client, auth):
    mine = submit(client, auth["alice"], idempotency_key="k")
    theirs = submit(client, auth["bob"], idempotency_key="k")
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert theirs.get_json()["task"]["owner"] == "bob"


def test_submit_with_a_used_key_and_other_args_is_a_409(client, auth):
    submit(client, auth["alice"], idempotency_key="k")
    r = client.post(
        "/api/tasks",
        json={"type": "render", "args": {"prompt": "a dog"}, "idempotency_key": "k"},
        headers=auth["alice"],
    )
    assert (r.status_code, error_code(r)) == (409, "idempotency_conflict")


@pytest.mark.parametrize(
    "body, code",
    [
        ({"type": "nope", "args": {}}, "unknown_task_type"),
        ({"type": "render", "args": [1, 2]}, "invalid"),
        ({"type": "render", "args": {"x": float("inf")}}, "invalid"),
        ({"type": "render", "args": {}, "priority": "high"}, "invalid"),
        ({"type": "render", "args": {}, "delay": -1}, "invalid"),
        ({"type": "render", "args": {}, "expires_in": 0}, "invalid"),
        ({"type": "render", "args": {}, "expires_in": "soon"}, "invalid"),
        ({"type": "render", "args": {}, "idempotency_key": ""}, "invalid"),
        ({"type": "render", "args": {}, "colour": "red"}, "invalid"),
        ({"args": {}}, "invalid"),
        ({"type": 7, "args": {}}, "invalid"),
    ],
)
def test_submit_with_bad_input_is_a_400_naming_the_problem(client, auth, body, code):
    r = client.post(
        "/api/tasks", data=json.dumps(body, allow_nan=True), content_type="application/json", headers=auth["alice"]
    )
    assert (r.status_code, error_code(r)) == (400, code)
    assert r.get_json()["error"]["message"]


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", b'"text"', b"[" * 100_000, b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_a_400(client, auth, data):
    r = client.post("/api/tasks", data=data, content_type="application/json", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (400, "invalid")


def test_an_oversized_body_is_a_413(client, auth):
    big = json.dumps({"type": "render", "args": {"prompt": "x" * (2 << 20)}})
    r = client.post("/api/tasks", data=big, content_type="application/json", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (413, "request_entity_too_large")


def test_args_over_the_engine_limit_but_within_the_body_limit_are_a_400(client, auth):
    body = json.dumps({"type": "render", "args": {"prompt": "x" * ((1 << 20) + 10)}})
    r = client.post("/api/tasks", data=body, content_type="application/json", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (400, "invalid")


# -- list -----------------------------------------------------------------------------------------
def test_list_shows_the_callers_tasks_newest_first_in_pages(client, auth, engine):
    ids = [submit(client, auth["alice"], args={"prompt": str(i)}).get_json()["task"]["id"] for i in range(5)]
    submit(client, auth["bob"])
    seen, cursor = [], None
    for _ in range(3):
        r = client.get(
            "/api/tasks", query_string={"limit": 2, **({"cursor": cursor} if cursor else {})}, headers=auth["alice"]
        )
        assert r.status_code == 200
        page = r.get_json()
        seen += [t["id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # newest first; tasks created in the same millisecond come in descending id order (Redis's)
    assert seen == sorted(ids, key=lambda i: (round(engine.get(i).created_at * 1000), i), reverse=True)


def test_list_filters_by_status_type_and_queue(client, auth, engine):
    pending = task_in(engine, State.PENDING)
    done = task_in(engine, State.SUCCESS)
    timed_out = task_in(engine, State.TIMEOUT)

    def ids(**query):
        r = client.get("/api/tasks", query_string=query, headers=auth["alice"])
        assert r.status_code == 200, r.get_json()
        return {t["id"] for t in r.get_json()["tasks"]}

    assert ids(status="SUCCESS") == {done.id}
    assert ids(type="render") == {pending.id, done.id}
    assert ids(queue="other") == {timed_out.id}
    assert ids(queue="nowhere") == set()


@pytest.mark.parametrize(
    "query", [{"status": "DONE"}, {"limit": "0"}, {"limit": "501"}, {"limit": "ten"}, {"cursor": "garbage"}]
)
def test_list_with_a_bad_filter_is_a_400(client, auth, query):
    r = client.get("/api/tasks", query_string=query, headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (400, "invalid")


# -- read -----------------------------------------------------------------------------------------
def test_get_returns_the_task_with_its_history(client, auth, engine):
    task = task_in(engine, State.SUCCESS)
    r = client.get(f"/api/tasks/{task.id}", headers=auth["alice"])
    assert r.status_code == 200
    body = r.get_json()
    assert body["task"]["status"] == "SUCCESS" and body["task"]["result"] == {"url": "s3://cat"}
    assert [(e["from"], e["to"]) for e in body["history"] if e["kind"] == "transition"] == [
        ("", "PENDING"),
        ("PENDING", "PROCESSING"),
        ("PROCESSING", "SUCCESS"),
    ]


@pytest.mark.parametrize("task_id", [GHOST, "nonsense", "images.XYZ", "a" * 500])
def test_an_unknown_task_is_a_404(client, auth, task_id):
    r = client.get(f"/api/tasks/{task_id}", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (404, "not_found")


def test_long_poll_answers_at_once_when_the_version_already_differs(client, auth, engine):
    task = task_in(engine, State.PENDING)
    started = time.monotonic()
    r = client.get(f"/api/tasks/{task.id}?wait=30&version=0", headers=auth["alice"])
    assert r.status_code == 200 and r.get_json()["task"]["version"] == 1
    assert time.monotonic() - started < 3


def test_long_poll_answers_when_the_task_changes(app, client, auth, engine):
    task = task_in(engine, State.PENDING)
    broker = app.extensions["ghostless"].broker
    thread = when_subscribed(broker, lambda: engine.claim(task.id, "w1"))
    r = client.get(f"/api/tasks/{task.id}?wait=30&version=1", headers=auth["alice"])
    thread.join()
    assert r.status_code == 200
    assert (r.get_json()["task"]["status"], r.get_json()["task"]["version"]) == ("PROCESSING", 2)


def test_long_poll_answers_unchanged_when_the_wait_ends_and_the_wait_is_capped(make_app, auth, engine):
    client = make_app(GHOSTLESS_LONGPOLL_MAX=0.2).test_client()
    task = task_in(engine, State.PENDING)
    started = time.monotonic()
    r = client.get(f"/api/tasks/{task.id}?wait=3600", headers=auth["alice"])
    assert r.status_code == 200 and r.get_json()["task"]["version"] == 1
    assert 0.2 <= time.monotonic() - started < 5


@pytest.mark.parametrize("query", ["wait=-1", "wait=soon", "wait=nan", "wait=1&version=x", "version=-3"])
def test_long_poll_with_bad_parameters_is_a_400(client, auth, engine, query):
    task = task_in(engine, State.PENDING)
    r = client.get(f"/api/tasks/{task.id}?{query}", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (400, "invalid")


# -- cancel, edit, retry --------------------------------------------------------------------------
def test_cancel_ends_the_task(client, auth, engine):
    task = task_in(engine, State.PROCESSING)
    r = client.post(f"/api/tasks/{task.id}/cancel", json={"reason": "changed my mind"}, headers=auth["alice"])
    assert r.status_code == 200
    assert (r.get_json()["task"]["status"], r.get_json()["task"]["reason"]) == ("CANCELLED", "changed my mind")


def test_cancelling_an_ended_task_is_a_409(client, auth, engine):
    task = task_in(engine, State.SUCCESS)
    r = client.post(f"/api/tasks/{task.id}/cancel", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (409, "illegal_transition")


def test_edit_replaces_the_task_with_a_linked_new_one(client, auth, engine):
    task = task_in(engine, State.PENDING)
    r = client.post(f"/api/tasks/{task.id}/edit", json={"args": {"prompt": "a dog"}}, headers=auth["alice"])
    assert r.status_code == 201
    new = r.get_json()["task"]
    assert (new["status"], new["args"], new["supersedes"], new["owner"]) == (
        "PENDING",
        {"prompt": "a dog"},
        task.id,
        "alice",
    )
    assert engine.get(task.id).superseded_by == new["id"]


@pytest.mark.parametrize("body", [{}, {"args": "a dog"}, {"args": None}])
def test_edit_without_valid_args_is_a_400(client, auth, engine, body):
    task = task_in(engine, State.PENDING)
    r = client.post(f"/api/tasks/{task.id}/edit", json=body, headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (400, "invalid")
    assert engine.get(task.id).status == State.PENDING


def test_retry_reopens_a_failed_task(client, auth, engine):
    task = task_in(engine, State.FAILED)
    r = client.post(f"/api/tasks/{task.id}/retry", headers=auth["alice"])
    assert r.status_code == 200 and r.get_json()["task"]["status"] == "PENDING"


def test_retrying_a_task_that_has_not_failed_is_a_409(client, auth, engine):
    task = task_in(engine, State.PENDING)
    r = client.post(f"/api/tasks/{task.id}/retry", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (409, "illegal_transition")


# -- stats ----------------------------------------------------------------------------------------
def test_stats_show_counts_throughput_workers_and_breakers(client, auth, engine):
    task_in(engine, State.SUCCESS)
    task_in(engine, State.PENDING)
    worker = Worker(["t.images"], connection=engine.redis, name="w-images")
    worker.register_birth()
    engine.dispatcher = RQDispatcher(engine.redis, "t")  # workers are the executor's: RQ's registry
    r = client.get("/api/stats?minutes=2", headers=auth["alice"])
    assert r.status_code == 200
    body = r.get_json()
    assert body["queues"]["images"]["counts"]["SUCCESS"] == 1
    assert body["queues"]["images"]["counts"]["PENDING"] == 1
    assert len(body["throughput"]["images"]) == 3
    assert sum(m["SUCCESS"] for m in body["throughput"]["images"]) == 1
    assert [(w["name"], w["queues"]) for w in body["workers"]] == [("w-images", ["images"])]
    assert body["breakers"] == []


def test_stats_list_stuck_tasks(make_app, auth, engine):
    client = make_app(GHOSTLESS_STUCK_AFTER=0.05).test_client()
    waiting = task_in(engine, State.PENDING)
    overdue = engine.submit("quick", {}, owner="alice")
    engine.claim(overdue.id, "w1")
    wait_for_server_time(
        engine.redis, max(engine.get(overdue.id).lease_deadline, engine.get(waiting.id).updated_at + 0.05) * 1000
    )
    stuck = client.get("/api/stats", headers=auth["alice"]).get_json()["stuck"]
    assert {(s["task_id"], s["why"]) for s in stuck} == {
        (waiting.id, "pending_too_long"),
        (overdue.id, "lease_expired"),
    }


def test_a_users_stuck_task_is_listed_behind_more_than_a_page_of_other_owners(make_app, auth, engine):
    client = make_app(GHOSTLESS_STUCK_AFTER=0.05).test_client()
    for i in range(105):  # the API lists 100
        engine.submit("render", {"i": i}, owner="bob")
    mine = engine.submit("render", {}, owner="alice")  # last in line, behind bob's
    wait_for_server_time(engine.redis, (engine.get(mine.id).updated_at + 0.05) * 1000)
    stuck = client.get("/api/stats", headers=auth["alice"]).get_json()["stuck"]
    assert [s["task_id"] for s in stuck] == [mine.id]


def test_stats_survive_an_event_newer_than_the_clock_they_read(client, auth, engine):
    # An event can land between the stats' TIME and their stream read, in the next minute.
    task_in(engine, State.SUCCESS)
    key = engine.keys.queue_key("images", "events")
    sec, _ = engine.redis.time()
    engine.redis.xadd(
        key,
        {
            "id": "images.0123456789abcdef0123",
            "kind": "transition",
            "to": "SUCCESS",
            "owner": "alice",
            "type": "render",
            "version": "3",
            "at": str((int(sec) + 120) * 1000),
        },
        id=f"{(int(sec) + 120) * 1000}-0",
    )
    assert client.get("/api/stats", headers=auth["alice"]).status_code == 200


def test_a_multipart_part_without_a_name_is_an_unknown_field_400(client, auth):
    r = client.post(
        "/api/tasks",
        headers=auth["alice"],
        content_type="multipart/form-data; boundary=b",
        data=b"--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n--b--\r\n",
    )
    assert r.status_code == 400 and "unknown field" in r.get_json()["error"]["message"]


# -- health -----------------------------------------------------------------------------------------
def test_healthz_answers_without_authentication(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}


def test_readyz_loads_scripts_the_server_lacks(client, engine):
    forget_lua(engine.redis)
    first = client.get("/readyz")
    assert first.status_code == 200 and len(first.get_json()["loaded_now"]) == first.get_json()["scripts"]
    assert all(loaded(engine, name) for name in SCRIPTS)
    assert client.get("/readyz").get_json()["loaded_now"] == []


def _unreachable_app():
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    engine = Engine(client, namespace="t", dispatcher=None, check=False)
    return create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine})


def test_readyz_is_a_503_when_redis_is_unreachable():
    r = _unreachable_app().test_client().get("/readyz")
    assert (r.status_code, error_code(r)) == (503, "not_ready")


def test_api_calls_while_redis_is_unreachable_are_a_503():
    r = _unreachable_app().test_client().get("/api/tasks", headers={"Authorization": "Bearer gl_whatever"})
    assert (r.status_code, error_code(r)) == (503, "unavailable")
    assert r.headers["Retry-After"] == "5"


def test_an_app_without_an_engine_or_app_name_is_refused_at_creation(monkeypatch):
    monkeypatch.delenv("GHOSTLESS_APP", raising=False)
    with pytest.raises(AppError, match="no app"):
        create_app({**TEST_CONFIG})


def test_the_engine_may_be_named_by_ghostless_app(monkeypatch):
    monkeypatch.setenv("GHOSTLESS_TEST_FAKE", "1")
    monkeypatch.setenv("GHOSTLESS_APP", "tests.apps.web:engine")
    app = create_app({**TEST_CONFIG})
    assert app.test_client().get("/readyz").status_code == 200
    assert app.extensions["ghostless"].engine.keys.ns == "t"


# -- errors ---------------------------------------------------------------------------------------
def test_unknown_routes_and_methods_answer_json(client, auth):
    missing = client.get("/api/nothing", headers=auth["alice"])
    assert (missing.status_code, error_code(missing)) == (404, "not_found")
    wrong = client.delete("/api/tasks", headers=auth["alice"])
    assert (wrong.status_code, error_code(wrong)) == (405, "method_not_allowed")
    assert "POST" in wrong.headers["Allow"]


def test_an_unexpected_error_is_logged_and_answered_500_json(app, client, auth, monkeypatch, caplog):
    def boom(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(app.extensions["ghostless"].engine, "stats", boom)
    r = client.get("/api/stats", headers=auth["alice"])
    assert (r.status_code, error_code(r)) == (500, "internal_error")
    assert "bug" not in r.get_data(as_text=True)
    wait_until(lambda: any("unexpected error" in m for m in caplog.messages), what="the error logged")
