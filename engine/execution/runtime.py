"""Process-wide state of a worker process: the engine it serves and its shutdown request.

RQ calls ``ghostless.execution.runner.run_task(task_id)`` by name; the worker class sets
these before the first job, and a forked work-horse inherits them.
"""

from __future__ import annotations

import mmap
import os
import threading
import time

_lock = threading.Lock()
_engine = None
_worker = None
shutdown_requested = threading.Event()  # set on the first SIGTERM: finish within the grace, else release
_shutdown_at: float | None = None
# The task the current job's claim took (it may be another than the job's: lua/claim.lua), written by
# the work-horse and read by its parent when the horse dies: memory shared across the fork, made by
# each worker process for itself (workers forked from one supervisor must not share one).
_claimed: mmap.mmap | None = None
_claimed_by = 0  # the pid of the worker process that made it


def new_job() -> None:
    """In a worker process, before each job: no claim yet (a shared slot of this process's own)."""
    global _claimed, _claimed_by
    if _claimed_by != os.getpid():
        _claimed, _claimed_by = mmap.mmap(-1, 128), os.getpid()
    note_claimed(None)


def note_claimed(task_id: str | None) -> None:
    """Record the task the current job's claim took (None: no claim yet)."""
    if _claimed is None:
        return
    data = (task_id or "").encode()[:127]
    _claimed.seek(0)
    _claimed.write(data + b"\0" * (128 - len(data)))


def claimed() -> str | None:
    """The task the current job's claim took, as its work-horse recorded it; None before."""
    return _claimed[:128].split(b"\0", 1)[0].decode() or None if _claimed is not None else None


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
