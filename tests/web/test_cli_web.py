"""``ghostless web`` and ``ghostless user add|list|revoke`` (engine/cli/root.py, web/serve.py)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

import fakeredis
import pytest
from click.testing import CliRunner

from ghostless import Engine
from ghostless.cli.root import main
from ghostless.core.sweepers import record_tick
from tests.apps import web as web_app
from tests.conftest import register_test_types
from tests.support.procs import ROOT, Proc
from tests.support.redis_server import free_port
from tests.support.wait import wait_until

APP = "tests.apps.web:engine"


@pytest.fixture(params=["fake", "real"])
def cli(request, monkeypatch):
    """(run, engine): run the CLI in-process against the same Redis as ``engine``."""
    monkeypatch.setenv("GHOSTLESS_TEST_NS", "t")
    if request.param == "fake":
        monkeypatch.setenv("GHOSTLESS_TEST_FAKE", "1")
        client = fakeredis.FakeRedis(server=web_app.FAKE)
        env = {}
    else:
        monkeypatch.delenv("GHOSTLESS_TEST_FAKE", raising=False)
        server = request.getfixturevalue("redis_server")
        client = server.client()
        env = {"GHOSTLESS_REDIS_URL": server.url}
    client.flushall()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))

    def run(*args):
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    yield run, engine
    client.close()


def test_user_add_prints_a_token_that_authenticates_the_user(cli):
    run, engine = cli
    result = run("user", "add", "alice", "--app", APP)
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert token.startswith("gl_") and "\n" not in token
    assert "not shown again" in result.stderr
    assert engine.users.authenticate(token).name == "alice"


def test_user_add_admin_and_list(cli):
    run, _engine = cli
    run("user", "add", "alice", "--app", APP)
    run("user", "add", "root", "--admin", "--app", APP)
    result = run("user", "list", "--app", APP)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["alice\tuser\ttokens=1", "root\tadmin\ttokens=1"]


def test_user_revoke_removes_the_user_and_their_tokens(cli):
    run, engine = cli
    token = run("user", "add", "bob", "--app", APP).stdout.strip()
    result = run("user", "revoke", "bob", "--app", APP)
    assert (result.exit_code, result.stdout.strip()) == (0, "revoked bob")
    assert engine.users.authenticate(token) is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["user", "add", "no spaces allowed"], "user name must be"),
        (["user", "revoke", "nobody"], "no user 'nobody'"),
    ],
)
def test_user_command_errors_are_one_line(cli, args, message):
    run, _ = cli
    result = run(*args, "--app", APP)
    assert result.exit_code != 0
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error")]) == 1


def test_commands_without_an_app_fail_in_one_line(monkeypatch):
    monkeypatch.delenv("GHOSTLESS_APP", raising=False)
    for args in (["user", "list"], ["web"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "no app" in result.output and "Traceback" not in result.output


def test_web_without_gunicorn_serves_with_flasks_threaded_server_and_warns(cli, monkeypatch, caplog):
    run, _engine = cli
    from flask import Flask

    import ghostless.web.serve

    calls = []
    monkeypatch.setattr(ghostless.web.serve, "gunicorn_available", lambda: False)
    monkeypatch.setattr(Flask, "run", lambda self, **kw: calls.append((self, kw)))
    result = run("web", "--app", APP, "--port", "8123")
    assert result.exit_code == 0, result.output
    [(app, kwargs)] = calls
    assert kwargs == {"host": "127.0.0.1", "port": 8123, "threaded": True}
    assert app.extensions["ghostless"].engine.keys.ns == "t"
    assert any("gunicorn is not installed" in m for m in caplog.messages)


@pytest.mark.slow
def test_web_serves_the_api_and_live_events_with_gunicorn(redis_server):
    client = redis_server.client()
    client.flushall()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=None))
    token = engine.users.add("alice")
    port = free_port()
    env = {
        **os.environ,
        "GHOSTLESS_REDIS_URL": redis_server.url,
        "GHOSTLESS_TEST_NS": "t",
        "GHOSTLESS_SECRET_KEY": "k",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("GHOSTLESS_TEST_FAKE", None)
    proc = Proc(
        [
            sys.executable,
            "-m",
            "ghostless",
            "web",
            "--app",
            APP,
            "--port",
            str(port),
            "--workers",
            "1",
            "--threads",
            "4",
        ],
        env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _get(base + "/healthz") == (200, {"status": "ok"}), timeout=20, what="gunicorn to serve /healthz"
        )
        assert _get(base + "/readyz")[0] == 503  # no sweeper has ticked yet
        record_tick(engine, "test-sweeper")
        assert _get(base + "/readyz")[0] == 200
        task = engine.submit("render", {"prompt": "p"}, owner="alice")
        headers = {"Authorization": f"Bearer {token}"}
        assert _get(f"{base}/api/tasks/{task.id}", headers)[1]["task"]["owner"] == "alice"
        request = urllib.request.Request(f"{base}/api/tasks/{task.id}/events", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            lines = [stream.readline().decode() for _ in range(4)]
            assert lines[:2] == ["retry: 2000\n", "\n"] and lines[3].startswith("event: snapshot")
            lease = engine.claim(task.id, "w1")
            engine.complete(lease, {})
            rest = stream.read().decode()  # the stream ends after the terminal state
        assert "event: transition" in rest and '"to":"SUCCESS"' in rest
        assert "gthread" in proc.output() or "Booting worker" in proc.output()
    finally:
        proc.stop()
        client.close()


def _get(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return None, None


@pytest.mark.parametrize("server", ["gthread", "gevent"])
def test_several_web_processes_refuse_to_start_without_a_secret_key(cli, monkeypatch, server):
    run, _ = cli
    import ghostless.web.serve

    started = []
    monkeypatch.delenv("GHOSTLESS_SECRET_KEY", raising=False)
    monkeypatch.setattr(ghostless.web.serve, "_gunicorn", lambda *args: started.append(args))
    monkeypatch.setattr(ghostless.web.serve, "_gevent", lambda *args: started.append(args))
    result = run("web", "--app", APP, "--workers", "2", "--server", server)
    assert result.exit_code == 2 and started == []
    assert "--workers 2 needs GHOSTLESS_SECRET_KEY" in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error")]) == 1


def test_one_web_process_or_a_shared_key_starts(cli, monkeypatch):
    run, _ = cli
    import ghostless.web.serve

    started = []
    monkeypatch.setattr(ghostless.web.serve, "_gevent", lambda *args: started.append(args))
    monkeypatch.delenv("GHOSTLESS_SECRET_KEY", raising=False)
    assert run("web", "--app", APP, "--workers", "1").exit_code == 0
    monkeypatch.setenv("GHOSTLESS_SECRET_KEY", "shared")
    assert run("web", "--app", APP, "--workers", "2").exit_code == 0
    assert [args[3] for args in started] == [1, 2]


def test_web_serves_with_gevent_by_default_sized_for_ten_thousand_streams(cli, monkeypatch):
    run, _ = cli
    import ghostless.web.serve as serve_mod

    started = []
    monkeypatch.setattr(serve_mod, "_gevent", lambda *args: started.append(args))
    monkeypatch.setattr(serve_mod, "_gunicorn", lambda *args: pytest.fail("gthread is not the default"))
    assert run("web", "--app", APP, "--workers", "1").exit_code == 0
    [(spec, host, port, workers, connections)] = started
    assert (spec, host, port, workers) == (APP, "127.0.0.1", 8000, 1)
    assert serve_mod.held_cap(connections) >= 10_000  # streams per process
    assert connections + serve_mod.FD_SPARE <= 20_000  # within a 20,000 open-files limit


def test_web_with_server_gthread_serves_with_threads(cli, monkeypatch):
    run, _ = cli
    import ghostless.web.serve as serve_mod

    started = []
    monkeypatch.setattr(serve_mod, "_gunicorn", lambda *args: started.append(args))
    monkeypatch.setattr(serve_mod, "_gevent", lambda *args: pytest.fail("gevent asked for gthread"))
    assert run("web", "--app", APP, "--workers", "1", "--server", "gthread", "--threads", "8").exit_code == 0
    assert [args[:4] for args in started] == [("127.0.0.1", 8000, 1, 8)]


def test_web_without_gevent_serves_with_gthread_and_warns(cli, monkeypatch, caplog):
    run, _ = cli
    import ghostless.web.serve as serve_mod

    started = []
    monkeypatch.setattr(serve_mod, "gevent_available", lambda: False)
    monkeypatch.setattr(serve_mod, "_gunicorn", lambda *args: started.append(args))
    assert run("web", "--app", APP, "--workers", "1").exit_code == 0
    assert len(started) == 1
    assert any("gthread" in m and "needs gevent" in m for m in caplog.messages)


def test_serving_an_engine_without_an_app_spec_forks_gthread_workers_on_that_engine(monkeypatch, caplog):
    import ghostless.web.serve as serve_mod

    started = []
    monkeypatch.setattr(serve_mod, "_gunicorn", lambda *args: started.append(args))
    monkeypatch.setattr(serve_mod, "_gevent", lambda *args: pytest.fail("gevent cannot serve an engine object"))
    engine = object()
    serve_mod.serve(engine, None, "127.0.0.1", 8000, 1, 4)
    assert [args[-1] for args in started] == [engine]
    assert any("needs an app spec" in m for m in caplog.messages)


def test_the_gevent_server_raises_the_open_files_limit_to_its_connections(monkeypatch):
    import resource

    import ghostless.web.serve as serve_mod

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        want = min(hard, 1000) if hard != resource.RLIM_INFINITY else 1000
        assert serve_mod.raise_open_files(1000) == want == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert serve_mod.raise_open_files(10) == want  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_a_real_multi_process_web_without_a_key_exits_at_once_with_one_line(redis_server):
    env = {**os.environ, "GHOSTLESS_REDIS_URL": redis_server.url, "GHOSTLESS_TEST_NS": "t", "PYTHONPATH": str(ROOT)}
    for name in ("GHOSTLESS_SECRET_KEY", "GHOSTLESS_TEST_FAKE"):
        env.pop(name, None)
    proc = Proc(
        [
            sys.executable,
            "-m",
            "ghostless",
            "web",
            "--app",
            APP,
            "--port",
            str(free_port()),
            "--workers",
            "2",
            "--threads",
            "2",
        ],
        env,
    )
    try:
        wait_until(lambda: not proc.alive(), timeout=30, what="the web command to refuse and exit")
        assert proc.popen.returncode == 2
        output = proc.output()
        assert "needs GHOSTLESS_SECRET_KEY" in output and "Traceback" not in output and "Booting" not in output
    finally:
        proc.stop()


def test_the_gevent_server_accepts_connections_in_batches_with_several_workers(monkeypatch):
    """gunicorn's own gevent worker takes one connection per loop turn when workers share a socket;
    in a reconnect storm the kernel's accept queue then overflows and pages wait for SYN retries."""
    import gunicorn.util

    import ghostless.web.serve as serve_mod
    from ghostless.web.geventworker import ACCEPT_BATCH, BatchAcceptGeventWorker, BatchAcceptServer

    execs = []
    monkeypatch.setattr(serve_mod.os, "execv", lambda path, args: execs.append(args))
    monkeypatch.setattr(serve_mod, "raise_open_files", lambda need: need)
    monkeypatch.setattr(serve_mod, "_cap_held", lambda slots: None)
    serve_mod._gevent(APP, "127.0.0.1", 8000, 2, 1000)
    [args] = execs
    worker = args[args.index("--worker-class") + 1]
    assert gunicorn.util.load_class(worker, section="gunicorn.workers") is BatchAcceptGeventWorker
    assert int(args[args.index("--backlog") + 1]) >= 4096  # the kernel caps it at net.core.somaxconn

    server = BatchAcceptServer(("127.0.0.1", 0), handle=lambda *a: None)
    server.max_accept = 1  # what gunicorn's GeventWorker.run sets with more than one worker
    assert server.max_accept == ACCEPT_BATCH > 1
