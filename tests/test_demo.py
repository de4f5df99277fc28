"""`make demo ARGS=--once`: the main job, end to end, must leave every task terminal and none lost."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import need_redis_server

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_once_ends_with_every_task_terminal_and_none_lost():
    need_redis_server()
    _demo_once(dict(os.environ, GHOSTLESS_DEMO_SPEED="0.3", PYTHONPATH=str(ROOT)))


@pytest.mark.slow
def test_demo_once_on_the_embedded_fakeredis_server_loses_no_task():
    """What `make demo` runs where no redis-server is installed: ghostless.demo.fakeserver, RQ 3.0 workers."""
    env = dict(os.environ, GHOSTLESS_DEMO_SPEED="0.3", PYTHONPATH=str(ROOT), GHOSTLESS_DEMO_REDIS="fake")
    out = _demo_once(env)
    assert "Redis is an embedded fakeredis server" in out


def _demo_once(env: dict) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "ghostless.demo.run", "--once", "--tasks", "8", "--timeout", "90"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    summary = dict(
        line.rsplit(None, 1)
        for line in out.split("summary", 1)[1].strip().splitlines()
        if line.strip() and not line.strip().startswith("invariant")
    )
    summary = {k.strip(): int(v) for k, v in summary.items()}
    assert summary["lost"] == 0 and summary["not terminal"] == 0
    assert summary.get("SUCCESS", 0) + summary.get("FAILED", 0) == 8
    assert summary["recovered crashes"] >= 1  # the crashing task's horse died and it was retried
    return out


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])  # as Ctrl-C does; and with no chance to clean up
def test_demo_serves_the_dashboard_with_a_login_link_and_stops_everything_it_started(tmp_path, stop):
    import signal
    import socket
    import urllib.request

    from tests.support.procs import children, running
    from tests.support.tether import tether
    from tests.support.wait import wait_until

    need_redis_server()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "demo.log"
    env = dict(os.environ, GHOSTLESS_DEMO_SPEED="0.3", PYTHONPATH=str(ROOT))
    with open(log, "w") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "ghostless.demo.run", "--port", str(port), "--tasks", "3"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=tether(signal.SIGTERM),  # as Ctrl-C: the demo stops what it started
        )
    started: list[int] = []
    try:
        wait_until(lambda: "log in:" in log.read_text(), timeout=60, what="the demo's login link")
        link = next(line.split()[2] for line in log.read_text().splitlines() if line.startswith("log in:"))
        assert link.startswith(f"http://127.0.0.1:{port}/login/")
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200

        def family(pid):
            found = [pid]
            for child in children(pid):
                found += family(child)
            return found

        started += family(demo.pid)
        assert len(started) >= 5  # redis-server, sweeper, 2 workers, web (and their children)
        demo.send_signal(getattr(signal, stop))
        demo.wait(30)

        # After a SIGKILL its children are sent SIGTERM (Linux): the workers' warm shutdown
        # gives back the tasks they run.
        wait_until(
            lambda: not any(running(pid) for pid in started), timeout=60, what="every process the demo started to end"
        )
    finally:
        if demo.poll() is None:
            demo.kill()
        for pid in started:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
