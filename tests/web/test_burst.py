"""A reconnect storm on the default server: the real ``ghostless web`` command line (no flags
but the app, port and Redis), a private redis-server, a few hundred task pages opening their
streams at once (what every browser does when a web process restarts). Every one opens with
its snapshot: no 503, no reset, no retry; the web's Redis connections stay few."""

from __future__ import annotations

import os
import sys
import urllib.request

import pytest

from ghostless import Engine
from tests.conftest import register_test_types
from tests.support.procs import ROOT, Proc
from tests.support.redis_server import free_port
from tests.support.wait import wait_until

from .burst import burst

pytestmark = pytest.mark.slow
PAGES = 300


def _up(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_a_burst_of_task_pages_all_open_on_the_default_server(redis_server):
    client = redis_server.client()
    client.flushall()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    # Each page is its own user's, watching its own task (as on an image service).
    pages = []
    for i in range(PAGES):
        token = engine.users.add(f"user{i}")
        task = engine.submit("render", {"prompt": str(i)}, owner=f"user{i}")
        pages.append((f"/api/tasks/{task.id}/events", token))
    port = free_port()
    env = {
        **os.environ,
        "GHOSTLESS_TEST_NS": "t",
        "GHOSTLESS_SECRET_KEY": "k",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    for name in ("GHOSTLESS_TEST_FAKE", "GHOSTLESS_HELD_MAX", "GHOSTLESS_REDIS_URL"):
        env.pop(name, None)
    others = len(client.client_list())  # this test's, and any an earlier test left on this server
    proc = Proc(
        [
            sys.executable,
            "-m",
            "ghostless",
            "web",
            "--app",
            "tests.apps.web:engine",
            "--port",
            str(port),
            "--redis-url",
            redis_server.url,
        ],
        env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _up(base), timeout=30, what="the web server to answer")
        connections = []
        outcomes, _ = burst(
            port, pages, timeout=60, during=lambda: connections.append(len(client.client_list()) - others)
        )
        assert outcomes == {"opened": PAGES}, outcomes
        assert "Using worker: ghostless.web.geventworker.BatchAcceptGeventWorker" in proc.output()
        # Two processes, each a pool of 8 and its stream reader: not one connection per page.
        assert connections and connections[0] <= 2 * 9, connections
    finally:
        proc.stop()
        client.close()
