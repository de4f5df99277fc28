"""The default ``ghostless web`` (and ``--server gevent``) under abuse, with real gunicorn
processes on free loopback ports: slow or silent clients, one user's many streams and
long-polls, and a long-poll whose client leaves must not stop /healthz or other users; access
logs never carry login codes."""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import time
import urllib.error
import urllib.request

import pytest

from ghostless import Engine
from tests.conftest import register_test_types
from tests.support.procs import ROOT, Proc
from tests.support.redis_server import free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow

APP = "tests.apps.web:engine"
MANY = 70  # more than the default server's threads per process (32)


@pytest.fixture
def start_web(redis_server):
    client = redis_server.client()
    client.flushall()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    procs = []

    def start(server: str = "gthread", *args: str, **env: str):
        if server == "gevent":
            pytest.importorskip("gevent")
        port = free_port()
        full_env = {
            **os.environ,
            "GHOSTLESS_REDIS_URL": redis_server.url,
            "GHOSTLESS_TEST_NS": "t",
            "GHOSTLESS_SECRET_KEY": "k",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            **env,
        }
        for name in ("GHOSTLESS_TEST_FAKE", "GHOSTLESS_HELD_MAX"):
            full_env.pop(name, None)
        proc = Proc(
            [sys.executable, "-m", "ghostless", "web", "--app", APP, "--port", str(port), "--server", server, *args],
            full_env,
        )
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: get(base, "/healthz")[0] == 200, timeout=30, what="the web server to answer")
        return base, port, proc

    yield engine, start
    for proc in procs:
        proc.stop()
    client.close()


def get(base: str, path: str, token: str | None = None, timeout: float = 5.0):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, None


def connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if data:
        sock.sendall(data)
    return sock


def request(path: str, token: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode()


def first_answers(socks: list[socket.socket], timeout: float = 4.0) -> list[bytes]:
    """What the server sent first on each socket, read side by side until a common deadline: a
    status line and, for a stream, up to its first ``retry:`` line (a refused stream ends there;
    an open one goes on; a long-poll held open has sent nothing)."""
    data = dict.fromkeys(socks, b"")

    def complete(d: bytes) -> bool:
        return b"retry: " in d or (d.startswith(b"HTTP/1.1 4") and b"\r\n\r\n" in d)

    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for sock in socks:
            sel.register(sock, selectors.EVENT_READ)
        while sel.get_map() and time.monotonic() < deadline:
            for key, _ in sel.select(max(0.0, deadline - time.monotonic())):
                chunk = key.fileobj.recv(4096)
                data[key.fileobj] += chunk
                if not chunk or complete(data[key.fileobj]):
                    sel.unregister(key.fileobj)
    return [data[sock] for sock in socks]


def others_are_served(base: str, token: str, task_id: str) -> None:
    """/healthz and another user's request answer promptly, again and again (both workers)."""
    for _ in range(6):
        assert get(base, "/healthz", timeout=4)[0] == 200
        status, body = get(base, f"/api/tasks/{task_id}", token, timeout=4)
        assert status == 200 and json.loads(body)["task"]["id"] == task_id


@pytest.mark.parametrize("server", ["gthread", "gevent"])
@pytest.mark.parametrize(
    "opening",
    [b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", b""],
    ids=["half-sent-heads", "silent-connections"],
)
def test_slow_clients_without_a_login_do_not_stop_healthz_or_other_users(start_web, server, opening):
    engine, start = start_web
    token = engine.users.add("bob")
    task = engine.submit("render", {"prompt": "p"}, owner="bob")
    base, port, _ = start(server)
    slow = [connect(port, opening) for _ in range(MANY)]
    try:
        # Before, each half-sent head held one of the 2 x 32 threads for as long as its sender
        # liked (a silent connection for 5 s each time): /healthz hung.
        others_are_served(base, token, task.id)
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.parametrize("server, bound", [("gthread", 1.0), ("gevent", 2.0)])
def test_a_half_sent_request_head_is_closed_after_the_client_timeout(start_web, server, bound):
    _, start = start_web
    # gthread: GHOSTLESS_CLIENT_TIMEOUT; gevent: gunicorn bounds a head read by keepalive, set to it
    _, port, _ = start(server, GHOSTLESS_CLIENT_TIMEOUT=str(bound))
    with connect(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n") as slow:
        slow.settimeout(bound + 3)  # the server checks its deadlines about once a second
        assert slow.recv(100) == b""  # before (gthread), it waited for the rest for ever: a timeout here


def test_a_request_body_that_stalls_is_refused_after_the_client_timeout(start_web):
    engine, start = start_web
    token = engine.users.add("alice")
    _, port, _ = start("gthread", GHOSTLESS_CLIENT_TIMEOUT="1")
    head = (
        f"POST /api/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    with connect(port, head.encode() + b'{"type": "ren') as stalled:
        stalled.settimeout(4)  # before, the thread waited for the other 87 bytes for ever
        assert stalled.recv(100).startswith(b"HTTP/1.1 400")  # werkzeug: the body ended early


@pytest.mark.parametrize("server", ["gthread", "gevent"])
def test_one_users_many_streams_and_long_polls_do_not_stop_healthz_or_other_users(start_web, server):
    engine, start = start_web
    alice, bob = engine.users.add("alice"), engine.users.add("bob")
    mine = engine.submit("render", {"prompt": "p"}, owner="alice")
    theirs = engine.submit("render", {"prompt": "q"}, owner="bob")
    base, port, _ = start(server)
    streams = [connect(port, request("/api/events", alice)) for _ in range(MANY)]
    polls = [connect(port, request(f"/api/tasks/{mine.id}?wait=30", alice)) for _ in range(64)]
    held = streams + polls
    try:
        others_are_served(base, bob, theirs.id)
        # Past her cap (8 per process, 2 processes) a stream is told to come back later
        # (EventSource retries), never failed; a long-poll is refused with a 429.
        answers = first_answers(streams)
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers)
        assert sum(b"retry: 10000" in a for a in answers) >= MANY - 16
        assert sum(a.startswith(b"HTTP/1.1 429") for a in first_answers(polls)) >= 64 - 16
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("server", ["gthread", "gevent"])
def test_a_long_poll_whose_client_closed_frees_its_slot_at_once(start_web, server):
    engine, start = start_web
    token = engine.users.add("alice")
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    base, port, _ = start(server, "--workers", "1", GHOSTLESS_LONGPOLLS_PER_USER="1")
    # A probe that holds the slot for no time: its version is not the task's, so it answers at once
    # (200), or 429 while another long-poll holds the slot.
    probe = f"/api/tasks/{task.id}?wait=1&version={task.version + 1000}"
    held = False
    for _ in range(5):  # bounded: the one probe may (rarely) take the slot before the long-poll does
        waiting = connect(port, request(f"/api/tasks/{task.id}?wait=30", token))
        # A refused long-poll answers at once; one holding the slot sends nothing. Probing only after
        # that (not in a loop, where each probe takes the slot for a moment) keeps the two apart.
        refused = first_answers([waiting], 2.0)[0]
        held = not refused and get(base, probe, token)[0] == 429
        if held:
            break
        waiting.close()  # refused, or not yet admitted when the probe came: ask again once it is free
        wait_until(lambda: get(base, probe, token)[0] == 200, timeout=6, interval=0.05, what="a free slot")
    assert held
    waiting.close()
    # Before, the closed long-poll kept its thread and its slot for its whole 30 s. (It looks
    # every 0.5 s; the bound leaves room for a loaded machine, far below the 30 s.)
    wait_until(lambda: get(base, probe, token)[0] == 200, timeout=6, interval=0.05, what="the slot to be free again")


@pytest.mark.parametrize("server", ["gthread", "gevent"])
def test_login_codes_never_reach_the_access_log(start_web, server):
    engine, start = start_web
    engine.users.add("alice")
    code = engine.users.login_code("alice")
    base, _, proc = start(server)
    get(base, f"/login/{code}")
    get(base, "/login/made-up-code-12345?next=/")
    wait_until(lambda: proc.output().count("/login/[redacted]") >= 2, timeout=10, what="the access-log lines")
    assert code not in proc.output() and "made-up-code-12345" not in proc.output()


def test_the_development_server_redacts_login_codes_too(monkeypatch, caplog):
    import threading

    import fakeredis
    from flask import Flask
    from werkzeug.serving import make_server

    import ghostless.web.serve

    engine = register_test_types(Engine(fakeredis.FakeRedis(), namespace="t", dispatcher=None))
    engine.users.add("alice")
    code = engine.users.login_code("alice")
    servers = []

    def run(app, host, port, threaded):  # Flask.run on a server the test can stop
        servers.append(make_server(host, port, app, threaded=threaded))
        servers[0].serve_forever()

    monkeypatch.setattr(ghostless.web.serve, "gunicorn_available", lambda: False)
    monkeypatch.setattr(Flask, "run", run)
    caplog.set_level("INFO", logger="werkzeug")
    port = free_port()
    serving = threading.Thread(
        target=ghostless.web.serve.serve, args=(engine, None, "127.0.0.1", port, 1, 4), daemon=True
    )
    serving.start()
    try:
        wait_until(lambda: servers, timeout=10, what="the development server")
        with connect(port, f"GET /login/{code} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode()) as sock:
            assert sock.recv(100).startswith(b"HTTP/1.1 ")
        logged = lambda: "\n".join(r.getMessage() for r in caplog.records if r.name == "werkzeug")  # noqa: E731
        wait_until(lambda: "/login/" in logged(), timeout=5, what="the request's log line")
        assert "/login/[redacted]" in logged() and code not in logged()
    finally:
        if servers:
            servers[0].shutdown()
        serving.join(10)


def test_gunicorns_older_than_27_get_the_stock_gthread_worker(monkeypatch):
    import gunicorn

    from ghostless.web import threadworker

    assert threadworker.supported()  # the pinned 27
    monkeypatch.setattr(gunicorn, "version_info", (22, 0, 0))
    assert not threadworker.supported()  # pyproject allows >= 22, whose internals differ
