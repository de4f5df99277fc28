"""Held requests under abuse (web/held.py, web/sse.py, web/api.py): an idle stream ends soon
after its credential is gone, whatever its keep-alive interval; streams and long-polls are
capped per user and per process, refused so that clients come back later, and give their
slot back however they end."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from ghostless import State
from ghostless.web.held import LONGPOLL, STREAM, Held
from ghostless.web.sse import CREDENTIAL_CHECK
from tests.support.wait import wait_until

from .helpers import task_in
from .sse_client import open_sse

BUSY = ": busy: too many open streams, retrying later\n\nretry: 10000\n\n"


def held(app):
    return app.extensions["ghostless.held"]


@pytest.mark.parametrize("how", ["revoke", "logout"])
@pytest.mark.parametrize("path", ["/api/events", "/api/tasks/{id}/events"])
def test_an_idle_stream_ends_within_the_credential_check_after_a_revocation_or_logout(
    make_app, engine, tokens, path, how
):
    app = make_app(GHOSTLESS_SSE_KEEPALIVE=15.0)  # the default: before, the check waited for this tick
    task = task_in(engine, State.PROCESSING)
    browser = app.test_client()
    csrf = browser.post("/login", json={"token": tokens["alice"]}).get_json()["csrf_token"]
    stream = open_sse(browser, path.format(id=task.id))
    assert stream.next()["event"] in ("ready", "snapshot")
    reader = threading.Thread(target=stream.rest, kwargs={"timeout": 30}, daemon=True)
    reader.start()
    if how == "revoke":
        engine.users.revoke("alice")
    else:  # the same session, logged out from another tab
        other = app.test_client()
        other.set_cookie("ghostless_session", browser.get_cookie("ghostless_session").value)
        assert other.post("/logout", headers={"X-CSRF-Token": csrf, "Accept": "application/json"}).status_code == 200
    gone_at = time.monotonic()
    wait_until(lambda: not reader.is_alive(), timeout=CREDENTIAL_CHECK + 1.0, what="the stream to end")
    assert stream.ended and time.monotonic() - gone_at < CREDENTIAL_CHECK + 1.0


def test_a_stream_past_the_users_cap_tells_eventsource_to_retry_later_and_ends(make_app, engine, auth):
    app = make_app(GHOSTLESS_STREAMS_PER_USER=2)
    client = app.test_client()
    open_streams = [open_sse(client, "/api/events", headers=auth["alice"]) for _ in range(2)]
    for s in open_streams:
        assert s.next()["event"] == "ready"
    refused = client.get("/api/events", headers=auth["alice"])
    # 200 and text/event-stream: an error status would make EventSource give up for good.
    assert (refused.status_code, refused.mimetype) == (200, "text/event-stream")
    assert refused.get_data(as_text=True) == BUSY
    task = task_in(engine, State.PROCESSING)
    assert client.get(f"/api/tasks/{task.id}/events", headers=auth["alice"]).get_data(as_text=True) == BUSY
    other = open_sse(client, "/api/events", headers=auth["bob"])  # another user is not refused
    assert other.next()["event"] == "ready"
    assert held(app).count(STREAM, "alice") == 2
    for s in [*open_streams, other]:
        s.close()


def test_a_closed_stream_gives_its_slot_back(make_app, auth):
    app = make_app(GHOSTLESS_STREAMS_PER_USER=1)
    client = app.test_client()
    first = open_sse(client, "/api/events", headers=auth["alice"])
    assert first.next()["event"] == "ready"
    assert client.get("/api/events", headers=auth["alice"]).get_data(as_text=True) == BUSY
    first.close()
    assert held(app).count(STREAM) == 0
    again = open_sse(client, "/api/events", headers=auth["alice"])
    assert again.next()["event"] == "ready"
    again.close()


def test_a_stream_closed_before_its_first_message_gives_back_its_slot_and_subscriber(make_app, engine, auth):
    app = make_app(GHOSTLESS_STREAMS_PER_USER=1)
    task = task_in(engine, State.PROCESSING)
    response = app.test_client().get(f"/api/tasks/{task.id}/events", headers=auth["alice"], buffered=False)
    assert response.status_code == 200 and held(app).count(STREAM) == 1
    response.close()  # never read: the client left before the server wrote anything
    assert held(app).count(STREAM) == 0 and app.extensions["ghostless"].broker.subscribers() == 0
    assert app.extensions["ghostless"].guard.watching() == 0


def test_a_stream_that_ended_by_itself_gives_its_slot_back(make_app, engine, auth):
    app = make_app(GHOSTLESS_STREAMS_PER_USER=1)
    task = task_in(engine, State.PROCESSING)
    stream = open_sse(app.test_client(), f"/api/tasks/{task.id}/events", headers=auth["alice"])
    assert stream.next()["event"] == "snapshot"
    engine.cancel(task.id, by="alice")
    stream.rest()
    stream.close()  # what the server does with a response that has ended
    assert held(app).count(STREAM) == 0


def test_the_process_cap_refuses_streams_of_every_user_past_it(make_app, auth):
    app = make_app(GHOSTLESS_HELD_MAX=2)
    client = app.test_client()
    streams = [open_sse(client, "/api/events", headers=auth[name]) for name in ("alice", "bob")]
    for s in streams:
        assert s.next()["event"] == "ready"
    assert client.get("/api/events", headers=auth["root"]).get_data(as_text=True) == BUSY
    assert client.get("/healthz").status_code == 200
    for s in streams:
        s.close()


def test_a_long_poll_past_the_users_cap_is_answered_at_once_with_429_and_retry_after(make_app, engine, auth):
    app = make_app(GHOSTLESS_LONGPOLLS_PER_USER=1)
    client = app.test_client()
    task = task_in(engine, State.PENDING)
    answers = []
    waiting = threading.Thread(
        target=lambda: answers.append(client.get(f"/api/tasks/{task.id}?wait=5", headers=auth["alice"]))
    )
    waiting.start()
    wait_until(lambda: held(app).count(LONGPOLL, "alice") == 1, what="the first long-poll waiting")
    refused = client.get(f"/api/tasks/{task.id}?wait=5", headers=auth["alice"])
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "10"
    assert refused.get_json()["error"]["code"] == "too_many_waits"
    assert client.get(f"/api/tasks/{task.id}", headers=auth["alice"]).status_code == 200  # no wait: no cap
    assert client.get("/api/tasks/images.00000000000000000000?wait=5", headers=auth["alice"]).status_code == 404
    engine.cancel(task.id, by="alice")  # the waiting one answers, and gives its slot back
    waiting.join(10)
    assert answers[0].get_json()["task"]["status"] == "CANCELLED"
    assert held(app).count(LONGPOLL) == 0
    assert client.get(f"/api/tasks/{task.id}?wait=0.1", headers=auth["alice"]).status_code == 200


def test_held_counts_a_release_once_however_often_it_is_called():
    held = Held({"GHOSTLESS_STREAMS_PER_USER": 1, "GHOSTLESS_LONGPOLLS_PER_USER": 1, "GHOSTLESS_HELD_MAX": 5})
    release = held.acquire(STREAM, "alice")
    assert held.acquire(STREAM, "alice") is None and held.acquire(LONGPOLL, "alice") is not None
    release()
    release()
    assert (held.count(STREAM), held.count(LONGPOLL), held.total) == (0, 1, 1)


UNAVAILABLE = ": unavailable: the task store did not answer in time, retrying later\n\nretry: 10000\n\n"


@pytest.mark.parametrize("path", ["/api/events", "/api/tasks/{id}/events"])
def test_a_stream_opening_while_the_web_pool_is_exhausted_is_told_to_retry_not_refused(make_app, engine, auth, path):
    app = make_app(GHOSTLESS_REDIS_CONNECTIONS=1, GHOSTLESS_REDIS_WAIT=0.05)
    task = task_in(engine, State.PROCESSING)
    client = app.test_client()
    pool = app.extensions["ghostless"].engine.redis.connection_pool
    busy = pool.get_connection()  # every connection of the web's pool taken: the credential check waits, in vain
    try:
        refused = client.get(path.format(id=task.id), headers=auth["alice"])
        assert (refused.status_code, refused.mimetype) == (200, "text/event-stream")
        assert refused.get_data(as_text=True) == UNAVAILABLE
        short = client.get(f"/api/tasks/{task.id}", headers=auth["alice"])  # not a stream: a 503 with Retry-After
        assert (short.status_code, short.headers["Retry-After"]) == (503, "5")
    finally:
        pool.release(busy)
    assert held(app).count(STREAM) == 0
    stream = open_sse(client, path.format(id=task.id), headers=auth["alice"])  # the retry then opens
    assert stream.next()["event"] in ("ready", "snapshot")
    stream.close()


@pytest.mark.parametrize("error", [redis.ConnectionError("No connection available."), redis.TimeoutError("slow")])
def test_a_redis_failure_at_a_streams_opening_read_is_a_retry_and_frees_its_slot(
    app, client, engine, auth, monkeypatch, error
):
    import ghostless.web.sse

    task = task_in(engine, State.PROCESSING)

    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(ghostless.web.sse.wq, "snapshot", failing)
    refused = client.get(f"/api/tasks/{task.id}/events", headers=auth["alice"])
    assert (refused.status_code, refused.get_data(as_text=True)) == (200, UNAVAILABLE)
    assert held(app).count(STREAM) == 0 and app.extensions["ghostless"].broker.subscribers() == 0


def test_a_missing_task_is_still_a_404_and_frees_its_slot(app, client, auth):
    r = client.get("/api/tasks/images.00000000000000000000/events", headers=auth["alice"])
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "not_found"
    assert held(app).count(STREAM) == 0 and app.extensions["ghostless"].broker.subscribers() == 0


def test_a_refused_credential_stays_a_401_so_eventsource_stops(client, engine):
    task = task_in(engine, State.PROCESSING)
    r = client.get(f"/api/tasks/{task.id}/events", headers={"Authorization": "Bearer gl_wrong"})
    assert r.status_code == 401  # retrying a wrong token cannot succeed: EventSource may give up
