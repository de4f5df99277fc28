"""The context a task function receives: stages, progress, checkpoints, cancellation."""

from __future__ import annotations

import logging
import threading
from typing import Any

from ghostless.core.errors import REDIS_FAULTS, RedisUnavailable
from ghostless.core.models import Lease


class AttemptStopped(BaseException):
    """Ends the task function without an outcome being reported: raised by
    ``ctx.stop_if_cancelled()``, or into the function by force. A BaseException,
    so task code catching Exception does not swallow it."""


class AttemptReleased(AttemptStopped):
    """Stopped by force at the end of a shutdown's grace period: the lease is released."""


class _Stage:
    """Returned by ctx.stage(): works as a plain call or as a ``with`` block."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class TaskContext:
    """What a task function gets as its first argument.

    ``ctx.cancelled`` turns true when the task is cancelled, its lease is lost or
    Redis is unreachable past the lease: the outcome will not be recorded, so long
    loops should check it (or call ``ctx.stop_if_cancelled()``) and stop. Calls on
    a lost lease raise LeaseLost; let it propagate. A worker shutdown does not
    cancel: the attempt may finish within the grace period, after which it is
    stopped by force and released.

    A stage, progress or checkpoint call that fails because of Redis (unreachable, timed out,
    loading, full, read-only) raises RedisUnavailable instead of the redis-py error: let it
    propagate too, and the attempt is released without being counted (reason ``redis_error``).
    The task's own redis-py errors (its own client, its own calls) stay its own failures.
    """

    def __init__(self, engine, lease: Lease, checkpoints: dict[str, Any] | None = None):
        self._engine = engine
        self.lease = lease
        self._cancel = threading.Event()
        self.stop_reason = ""
        self._checkpoints = dict(checkpoints or {})
        # An adapter, not a logger per task id: loggers live for the life of the process.
        self.logger = logging.LoggerAdapter(
            logging.getLogger(f"ghostless.task.{lease.type}"), {"task_id": lease.task_id, "attempt": lease.attempt}
        )

    @property
    def task_id(self) -> str:
        return self.lease.task_id

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    @property
    def args(self) -> Any:
        return self.lease.args

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self, reason: str) -> None:
        """Ask the function to stop (called by the heartbeat thread)."""
        if not self._cancel.is_set():
            self.stop_reason = reason
            self._cancel.set()

    def stop_if_cancelled(self) -> None:
        """Raise AttemptStopped when the attempt's outcome can no longer be used."""
        if self._cancel.is_set():
            raise AttemptStopped(self.stop_reason)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on cancellation. Returns ``ctx.cancelled``."""
        return self._cancel.wait(seconds)

    def stage(self, name: str) -> _Stage:
        """Enter a declared stage (its deadline starts now)."""
        self._call("stage", name)
        return _Stage(name)

    def progress(self, fraction: float, message: str = "") -> None:
        self._call("progress", fraction, message)

    def checkpoint(self, key: str, value: Any) -> None:
        """Save a value later attempts see in ``ctx.checkpoints`` (e.g. an upload already done)."""
        self._call("checkpoint", key, value)
        self._checkpoints[key] = value

    def _call(self, verb: str, *args) -> None:
        try:
            getattr(self._engine, verb)(self.lease, *args)
        except REDIS_FAULTS as e:
            raise RedisUnavailable(f"ctx.{verb}", e) from e

    @property
    def checkpoints(self) -> dict[str, Any]:
        return dict(self._checkpoints)
