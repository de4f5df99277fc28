"""App-wide answers (web/app.py): no API or JSON answer is cached or content-sniffed."""

from __future__ import annotations

import pytest

from ghostless import State

from .helpers import GHOST, task_in

JSON = {"Accept": "application/json"}


def assert_private(response):
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "method, url, status",
    [
        ("GET", "/api/tasks", 200),
        ("GET", "/api/me", 200),
        ("GET", "/api/stats", 200),
        ("GET", f"/api/tasks/{GHOST}", 404),
        ("POST", "/api/tasks", 400),
        ("DELETE", "/api/tasks", 405),
        ("GET", "/api/no-such-call", 404),
        ("GET", f"/api/tasks/{GHOST}/events", 404),
    ],
)
def test_every_api_answer_is_no_store_and_nosniff(client, auth, method, url, status):
    r = client.open(url, method=method, headers=auth["alice"], json={} if method == "POST" else None)
    assert r.status_code == status
    assert_private(r)


def test_an_unauthenticated_api_answer_is_no_store_and_nosniff(client):
    r = client.get("/api/tasks")
    assert r.status_code == 401
    assert_private(r)


def test_an_event_stream_is_no_store_and_nosniff(client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    r = client.get(f"/api/tasks/{task.id}/events", headers=auth["alice"], buffered=False)
    assert r.mimetype == "text/event-stream"
    assert_private(r)
    r.close()


def test_an_internal_error_is_no_store_and_nosniff(client, engine, auth, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(engine, "stats", broken)
    r = client.get("/api/stats", headers=auth["alice"])
    assert (r.status_code, r.get_json()["error"]["code"]) == (500, "internal_error")
    assert_private(r)


@pytest.mark.parametrize("url", ["/login", "/healthz", "/readyz"])
def test_json_answers_outside_the_api_are_no_store_and_nosniff(client, tokens, url):
    r = client.post(url, json={"token": tokens["alice"]}) if url == "/login" else client.get(url)
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert_private(r)
