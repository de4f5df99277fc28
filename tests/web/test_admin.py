"""Admin operations (web/admin.py): reclaim a stuck task, retry a type's FAILED tasks, drain and
resume a queue. They do not exist for anyone but an admin, and cookie sessions need CSRF."""

from __future__ import annotations

import pytest

from ghostless import State
from tests.support.snapshots import snapshot

from .helpers import task_in

#: (path, body, state of the task the call needs)
ENDPOINTS = [
    ("/api/admin/tasks/{id}/reclaim", None, State.PROCESSING),
    ("/api/admin/retry-failed", {"type": "render"}, State.FAILED),
    ("/api/admin/queues/images/drain", None, State.PENDING),
    ("/api/admin/queues/images/resume", None, State.PENDING),
]


def session(app, token: str):
    """A test client logged in with the session cookie; ``.csrf`` is its CSRF token."""
    client = app.test_client()
    r = client.post("/login", json={"token": token})
    assert r.status_code == 200
    client.csrf = r.get_json()["csrf_token"]
    return client


@pytest.mark.parametrize("caller, status", [("none", 401), ("alice", 404), ("bob", 404)])
@pytest.mark.parametrize("path, body, state", ENDPOINTS, ids=[p for p, *_ in ENDPOINTS])
def test_admin_calls_do_not_exist_for_users(client, engine, auth, caller, status, path, body, state):
    task = task_in(engine, state)
    before = snapshot(engine, task.id)
    r = client.post(path.format(id=task.id), json=body, headers=auth[caller])
    assert r.status_code == status
    if status == 404:  # exactly what an unknown path answers
        assert r.get_json() == client.post("/api/admin/no-such-thing", headers=auth[caller]).get_json()
    assert snapshot(engine, task.id) == before and engine.draining() == []


@pytest.mark.parametrize("caller, status", [("none", 401), ("alice", 404)])
def test_a_wrong_method_tells_a_user_nothing_about_admin_paths(client, auth, caller, status):
    r = client.get("/api/admin/retry-failed", headers=auth[caller])  # POST only: a 405 for an admin
    assert r.status_code == status and "Allow" not in r.headers
    assert r.get_json() == client.get("/api/admin/no-such-thing", headers=auth[caller]).get_json()
    assert client.get("/api/admin/retry-failed", headers=auth["root"]).status_code == 405


def test_a_users_cookie_session_gets_the_404_with_or_without_csrf(app, engine, tokens):
    browser = session(app, tokens["alice"])
    for headers in ({}, {"X-CSRF-Token": browser.csrf}):
        assert browser.post("/api/admin/queues/images/drain", headers=headers).status_code == 404
    assert engine.draining() == []


def test_an_admin_reclaims_a_stuck_task_now(client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    r = client.post(f"/api/admin/tasks/{task.id}/reclaim", headers=auth["root"])
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["state"] == "PENDING" == engine.get(task.id).status.value  # retried at once
    assert [e.reason for e in engine.history(task.id) if e.to == "TIMEOUT"] == ["reclaimed by root"]


def test_reclaiming_a_task_that_is_not_running_is_a_409(client, engine, auth):
    task = task_in(engine, State.PENDING)
    r = client.post(f"/api/admin/tasks/{task.id}/reclaim", headers=auth["root"])
    assert (r.status_code, r.get_json()["error"]["code"]) == (409, "illegal_transition")


def test_an_admin_retries_every_failed_task_of_a_type(client, engine, auth):
    failed = [task_in(engine, State.FAILED).id, task_in(engine, State.FAILED, owner="bob").id]
    done = task_in(engine, State.SUCCESS).id
    r = client.post("/api/admin/retry-failed", json={"type": "render"}, headers=auth["root"])
    assert r.get_json() == {"type": "render", "retried": 2}
    assert [engine.get(t).status for t in failed] == [State.PENDING, State.PENDING]
    assert engine.get(done).status == State.SUCCESS
    assert engine.history(failed[1])[-1].by == "root"


@pytest.mark.parametrize(
    "body, status",
    [
        ({"type": "nope"}, 400),
        ({}, 400),
        ({"type": "render", "x": 1}, 400),
        ({"type": "render", "queue": "nope"}, 404),
        ({"type": 5}, 400),
    ],
)
def test_bad_retry_failed_requests_are_4xx(client, auth, body, status):
    assert client.post("/api/admin/retry-failed", json=body, headers=auth["root"]).status_code == status


def test_an_admin_drains_and_resumes_a_queue(client, engine, auth):
    task_in(engine, State.PENDING)
    r = client.post("/api/admin/queues/images/drain", headers=auth["root"])
    assert r.get_json() == {"queue": "images", "draining": True} and engine.draining() == ["images"]
    assert client.get("/api/stats", headers=auth["root"]).get_json()["draining"] == ["images"]
    r = client.post("/api/admin/queues/images/resume", headers=auth["root"])
    assert r.get_json() == {"queue": "images", "draining": False} and engine.draining() == []


def test_draining_an_unknown_queue_is_a_404(client, auth):
    assert client.post("/api/admin/queues/nope/drain", headers=auth["root"]).status_code == 404


def test_an_admins_cookie_session_needs_the_csrf_token(app, engine, tokens):
    browser = session(app, tokens["root"])
    task_in(engine, State.PENDING)
    r = browser.post("/api/admin/queues/images/drain")
    assert (r.status_code, r.get_json()["error"]["code"]) == (403, "csrf_failed")
    assert engine.draining() == []
    r = browser.post("/api/admin/queues/images/drain", headers={"X-CSRF-Token": browser.csrf})
    assert r.status_code == 200 and engine.draining() == ["images"]


def test_the_task_pages_buttons_need_the_csrf_token_too(app, engine, tokens):
    browser = session(app, tokens["alice"])
    task = task_in(engine, State.PROCESSING)
    assert browser.post(f"/api/tasks/{task.id}/cancel", json={}).status_code == 403
    assert engine.get(task.id).status == State.PROCESSING
    r = browser.post(f"/api/tasks/{task.id}/cancel", json={}, headers={"X-CSRF-Token": browser.csrf})
    assert r.status_code == 200 and engine.get(task.id).status == State.CANCELLED
    html = browser.get("/", headers={"Accept": "text/html"}).get_data(as_text=True)
    assert f'<meta name="csrf-token" content="{browser.csrf}">' in html  # what the page's script sends
