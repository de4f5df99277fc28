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
    """What `make demo` runs where no redis-server is installed: engine.fakeserver, RQ 3.0 workers."""
    env = dict(os.environ, GHOSTLESS_DEMO_SPEED="0.3", PYTHONPATH=str(ROOT), GHOSTLESS_DEMO_REDIS="fake")
    out = _demo_once(env)
    assert "Redis is an embedded fakeredis server" in out


def _demo_once(env: dict) -> str:
    run = subprocess.run([sys.executable, "-m", "engine.demo", "--once", "--tasks", "8", "--timeout", "90"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    summary = dict(line.rsplit(None, 1) for line in out.split("summary", 1)[1].strip().splitlines()
                   if line.strip() and not line.strip().startswith("invariant"))
    summary = {k.strip(): int(v) for k, v in summary.items()}
    assert summary["lost"] == 0 and summary["not terminal"] == 0
    assert summary.get("SUCCESS", 0) + summary.get("FAILED", 0) == 8
    assert summary["recovered crashes"] >= 1  # the crashing task's horse died and it was retried
    return out
