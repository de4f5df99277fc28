"""Every endpoint as {nobody, another user, the owner, an admin}: the expected status, and no
trace of another user's task in any answer, list or stream (a foreign task is a 404 exactly
like a missing one, and changes nothing)."""

from __future__ import annotations

import pytest

from ghostless import State
from tests.support.snapshots import snapshot

from .helpers import GHOST, task_in
from .sse_client import open_sse

OWNER_OK = {"none": 401, "bob": 404, "alice": "ok", "root": "ok"}

#: (method, path, state the task must be in, JSON body, success status)
TASK_ENDPOINTS = [
    ("GET", "/api/tasks/{id}", State.PROCESSING, None, 200),
    ("GET", "/api/tasks/{id}?wait=0.05&version=2", State.PROCESSING, None, 200),
    ("POST", "/api/tasks/{id}/cancel", State.PROCESSING, {}, 200),
    ("POST", "/api/tasks/{id}/edit", State.PENDING, {"args": {"prompt": "a dog"}}, 201),
    ("POST", "/api/tasks/{id}/retry", State.FAILED, {}, 200),
    ("GET", "/api/tasks/{id}/events", State.SUCCESS, None, 200),
]


def _call(client, method, url, headers, body):
    if method == "GET":
        return client.get(url, headers=headers)
    return client.post(url, json=body, headers=headers)


@pytest.mark.parametrize("caller", list(OWNER_OK))
@pytest.mark.parametrize(
    "method, path, state, body, ok", TASK_ENDPOINTS, ids=[f"{m} {p}" for m, p, *_ in TASK_ENDPOINTS]
)
def test_task_endpoint_answers_by_caller(client, engine, auth, caller, method, path, state, body, ok):
    task = task_in(engine, state)
    before = snapshot(engine, task.id)
    r = _call(client, method, path.format(id=task.id), auth[caller], body)
    expected = ok if OWNER_OK[caller] == "ok" else OWNER_OK[caller]
    assert r.status_code == expected, r.get_data(as_text=True)[:300]
    if expected in (401, 404):
        assert snapshot(engine, task.id) == before  # refused without any effect
        ghost = _call(client, method, path.format(id=GHOST), auth[caller], body)
        assert (ghost.status_code, ghost.get_json()) == (r.status_code, r.get_json())  # no existence leak
        assert task.id not in r.get_data(as_text=True)
    elif "events" in path:
        r.close()


@pytest.mark.parametrize("caller, expected", [("none", 401), ("bob", 201), ("alice", 201), ("root", 201)])
def test_submit_answers_by_caller_and_the_task_is_the_callers(client, auth, caller, expected):
    r = client.post("/api/tasks", json={"type": "render", "args": {"prompt": "p"}}, headers=auth[caller])
    assert r.status_code == expected
    if expected == 201:
        assert r.get_json()["task"]["owner"] == caller


@pytest.mark.parametrize("caller, visible", [("bob", False), ("alice", True), ("root", True)])
def test_lists_show_only_the_callers_tasks_unless_admin(client, engine, auth, caller, visible):
    alices = {task_in(engine, s).id for s in (State.PENDING, State.SUCCESS, State.TIMEOUT)}
    bobs = task_in(engine, State.PENDING, owner="bob").id
    for query in ({}, {"status": "PENDING"}, {"queue": "other"}, {"type": "render"}):
        r = client.get("/api/tasks", query_string=query, headers=auth[caller])
        assert r.status_code == 200
        listed = {t["id"] for t in r.get_json()["tasks"]}
        if caller == "bob":
            assert not listed & alices
        elif caller == "alice":
            assert bobs not in listed
    everything = {t["id"] for t in client.get("/api/tasks", headers=auth[caller]).get_json()["tasks"]}
    assert (alices <= everything) == visible
    assert (bobs in everything) == (caller in ("bob", "root"))


def test_a_list_without_a_token_is_a_401(client):
    assert client.get("/api/tasks").status_code == 401


def test_only_an_admin_may_list_another_owner(client, engine, auth):
    alices = task_in(engine, State.PENDING).id
    as_bob = client.get("/api/tasks?owner=alice", headers=auth["bob"]).get_json()["tasks"]
    assert alices not in {t["id"] for t in as_bob}
    as_root = client.get("/api/tasks?owner=alice", headers=auth["root"]).get_json()["tasks"]
    assert {t["id"] for t in as_root} == {alices}


@pytest.mark.parametrize("caller, expected", [("none", 401), ("bob", 200), ("alice", 200), ("root", 200)])
def test_stats_show_stuck_tasks_of_the_caller_only_unless_admin(make_app, engine, auth, caller, expected):
    client = make_app(GHOSTLESS_STUCK_AFTER=0).test_client()
    alices = task_in(engine, State.PENDING).id
    r = client.get("/api/stats", headers=auth[caller])
    assert r.status_code == expected
    if expected == 200:
        stuck = {s["task_id"] for s in r.get_json()["stuck"]}
        assert (alices in stuck) == (caller in ("alice", "root"))
        if caller == "bob":
            assert alices not in r.get_data(as_text=True)


@pytest.mark.parametrize("caller", ["bob", "alice", "root"])
def test_the_event_feed_carries_only_the_callers_tasks_unless_admin(client, engine, auth, caller):
    feed = open_sse(client, "/api/events", headers=auth[caller])
    assert feed.next()["event"] == "ready"
    alices = task_in(engine, State.SUCCESS)  # four events: submit, claim, complete... on alice's task
    marker = engine.submit("render", {"prompt": "marker"}, owner=caller)
    seen = []
    while (event := feed.next()) is not None:
        seen.append(event["data"])
        if event["data"]["task_id"] == marker.id:
            break
    feed.close()
    saw_alices = any(e["task_id"] == alices.id for e in seen)
    assert saw_alices == (caller in ("alice", "root"))
    assert all(e["owner"] == caller for e in seen) or caller == "root"


def test_the_event_feed_without_a_token_is_a_401(client):
    assert client.get("/api/events").status_code == 401


def test_another_users_task_stream_is_a_404_before_any_event(client, engine, auth):
    task = task_in(engine, State.PROCESSING)
    r = client.get(f"/api/tasks/{task.id}/events", headers=auth["bob"])
    assert r.status_code == 404 and r.mimetype == "application/json"
