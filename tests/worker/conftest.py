"""Fixtures for execution tests: a private redis-server, an engine for the test process,
and real worker / sweeper processes (stopped in teardown; their output printed when a
test fails).

The test process builds its own Engine on the private server and registers the task
types of tests.apps.basic on it (``basic.register``): it submits and reads tasks, while
the worker processes import the same types with ``--app tests.apps.basic:engine``.
"""

from __future__ import annotations

import os
import signal

import pytest

from ghostless import Engine
from tests.apps import basic
from tests.support.procs import Proc, app_env, start_sweeper, start_worker
from tests.support.proxy import CutProxy
from tests.worker.helpers import LEASE, NS


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


@pytest.fixture
def server(private_redis):
    """A redis-server owned by this test (AOF on, fsync always: a restart loses nothing)."""
    return private_redis(appendonly=True, appendfsync="always")


@pytest.fixture
def proxy(server):
    """A TCP proxy in front of the test's Redis whose link the test can cut."""
    made = CutProxy(server.port)
    yield made
    made.close()


@pytest.fixture
def env(server):
    return app_env(server.url, NS, lease=LEASE)


@pytest.fixture
def engine(server):
    client = server.client(socket_timeout=10, socket_connect_timeout=5)
    yield basic.register(Engine(client, namespace=NS), lease=LEASE)
    client.close()


class Processes:
    """Starts workers and sweepers for one test; ``stop_all`` kills every one of them."""

    def __init__(self, env: dict):
        self.env = env
        self.started: list[Proc] = []
        self._names = 0

    def worker(
        self, worker_class: str = "fork", app: str = "tests.apps.basic:engine", name: str | None = None, **env: str
    ) -> Proc:
        if name is None:
            self._names += 1
            name = f"w{self._names}-{worker_class}"
        proc = start_worker({**self.env, **env}, app, worker_class, name=name)
        proc.name = name
        self.started.append(proc)
        return proc

    def sweeper(self, interval: float = 0.2, **env: str) -> Proc:
        proc = start_sweeper({**self.env, **env}, interval=interval)
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            horses = proc.children()
            proc.stop()
            for pid in horses:  # a work-horse is its own process group: not in proc's session kill
                _kill(pid, signal.SIGCONT)
                _kill(pid, signal.SIGKILL)

    def dump(self) -> str:
        parts = []
        for proc in self.started:
            rc = proc.popen.poll()
            try:
                output = proc.output()
            except OSError as e:  # the log file was removed under us
                output = f"(no output: {e})"
            parts.append(f"===== {' '.join(proc.args[1:])} (pid {proc.pid}, exit {rc}) =====\n{output}")
        return "\n".join(parts)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture
def procs(env, request):
    made = Processes(env)
    yield made
    made.stop_all()
    failed = any(
        getattr(request.node, f"rep_{when}", None) is not None and getattr(request.node, f"rep_{when}").failed
        for when in ("setup", "call")
    )
    if failed:
        print(made.dump())
    for proc in made.started:
        proc.log.close()
        try:
            os.unlink(proc.log.name)
        except FileNotFoundError:
            pass
