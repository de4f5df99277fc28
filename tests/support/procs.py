"""Real worker and sweeper processes for execution tests, chaos runs and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.tether import tether

ROOT = Path(__file__).resolve().parents[2]


def app_env(redis_url: str, namespace: str, lease: float = 1.5, **extra: str) -> dict:
    """Environment for processes running tests.apps.basic (or another app)."""
    env = dict(os.environ)
    env.update(
        GHOSTLESS_REDIS_URL=redis_url,
        GHOSTLESS_TEST_NS=namespace,
        GHOSTLESS_TEST_LEASE=str(lease),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class Proc:
    """A child process whose output goes to a temp file (read it with .output())."""

    def __init__(self, args: list[str], env: dict):
        # the child's output, read by .output() for as long as the Proc lives (no with: it outlives __init__)
        self.log = tempfile.NamedTemporaryFile(prefix="ghostless-proc-", suffix=".log", delete=False)  # noqa: SIM115
        self.args = args
        self.popen = subprocess.Popen(
            args,
            env=env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=tether(),
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def children(self) -> list[int]:
        return children(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGKILL the whole session and any work-horse (its own process group), and reap it."""
        horses = self.children() if self.alive() else []  # before the parent dies and they are orphaned
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in horses:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _processes():
    """(pid, state, ppid, session) of every process, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name may contain spaces: fields after the last ')'
        fields = stat.rsplit(")", 1)[1].split()
        yield int(entry.name), fields[0], int(fields[1]), int(fields[3])


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc; a work-horse is its own process group)."""
    return [p for p, _, ppid, _ in _processes() if ppid == pid]


def orphans(proc: Proc) -> list[int]:
    """Live processes of ``proc``'s session (its work-horses included) whose parent is no longer
    ``proc``: work-horses left behind by a worker."""
    return [
        p
        for p, state, ppid, sid in _processes()
        if sid == proc.pid and p != proc.pid and ppid != proc.pid and state != "Z"
    ]


def start_worker(
    env: dict, app: str = "tests.apps.basic:engine", worker_class: str = "fork", *queues: str, name: str | None = None
) -> Proc:
    args = [sys.executable, "worker.py", "--app", app, "--worker-class", worker_class, "--log-level", "INFO"]
    if name:
        args += ["--name", name]
    return Proc(args + list(queues), env)


def start_sweeper(env: dict, app: str = "tests.apps.basic:engine", interval: float = 0.5) -> Proc:
    return Proc([sys.executable, "-m", "ghostless", "sweeper", "--app", app, "--interval", str(interval)], env)
