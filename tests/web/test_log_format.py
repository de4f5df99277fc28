"""``ghostless web --log-format json``: gunicorn's own lines, its access log and the app's lines are
one JSON object each, on both servers (gevent runs gunicorn in a fresh interpreter)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support.procs import ROOT, Proc
from tests.support.redis_server import free_port
from tests.support.wait import wait_until

from .test_cli_web import APP, _get

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("server", ["gevent", "gthread"])
def test_web_lines_are_json(redis_server, server):
    redis_server.client().flushall()
    port = free_port()
    env = {**os.environ, "GHOSTLESS_REDIS_URL": redis_server.url, "GHOSTLESS_TEST_NS": "t", "PYTHONPATH": str(ROOT)}
    env.pop("GHOSTLESS_TEST_FAKE", None)
    args = [sys.executable, "-m", "ghostless", "web", "--app", APP, "--port", str(port), "--workers", "1"]
    proc = Proc([*args, "--server", server, "--log-format", "json"], env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _get(base + "/healthz")[0] == 200, timeout=30, what="the web to serve /healthz")
        assert _get(base + "/readyz")[0] == 503  # no sweeper: the app logs why, as JSON
        wait_until(lambda: "GET /readyz" in proc.output(), what="the access log line")
        lines = [json.loads(line) for line in proc.output().splitlines() if line.strip()]
        for entry in lines:
            assert {"time", "level", "logger", "message"} <= entry.keys(), entry
        loggers = {e["logger"] for e in lines}
        assert {"gunicorn.error", "gunicorn.access", "ghostless.web"} <= loggers, loggers
        assert any("no sweeper has ever ticked" in e["message"] for e in lines if e["logger"] == "ghostless.web")
    finally:
        proc.stop()
