"""Process-wide state of a worker process: the engine it serves and its shutdown request.

RQ calls ``ghostless.execution.runner.run_task(task_id)`` by name; the worker class sets
these before the first job, and a forked work-horse inherits them.
"""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_engine = None
_worker = None
shutdown_requested = threading.Event()  # set on the first SIGTERM: finish within the grace, else release
_shutdown_at: float | None = None


def install(engine, worker=None) -> None:
    global _engine, _worker
    with _lock:
        _engine, _worker = engine, worker


def engine():
    if _engine is None:
        raise RuntimeError(
            "no ghostless engine installed in this process: start workers with "
            "`ghostless worker --app module:engine` (or python worker.py --app ...)"
        )
    return _engine


def worker():
    return _worker


def request_shutdown() -> None:
    global _shutdown_at
    if not shutdown_requested.is_set():
        _shutdown_at = time.monotonic()
        shutdown_requested.set()


def shutdown_elapsed() -> float | None:
    return None if _shutdown_at is None else time.monotonic() - _shutdown_at


def reset() -> None:
    global _shutdown_at
    _shutdown_at = None
    shutdown_requested.clear()
