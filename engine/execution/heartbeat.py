"""The heartbeat thread: renews the lease while the task function runs.

Independent of the task code. On cancellation, lease loss, Redis being
unreachable past the lease, or a shutdown past its grace, it asks the function
to stop (``ctx.cancelled``) and, if the function has not returned after the
grace period, stops the attempt by force through ``force_stop(reason)``.

Redis unreachable: heartbeats time out within a third of the lease (Engine.heartbeat's own
client), and the attempt is given up once the lease has run out since the last renewal that
succeeded (or after ``max_failures`` failures in a row, sooner): asked to stop then, stopped by
force ``grace`` seconds later, so no later than lease + grace after that renewal, when the
sweeper may already have handed the task to another worker.

Threads are kept for the next attempt of the same process (a simple worker runs attempts one
after another): starting a thread per attempt cost about 0.1 ms of a no-op job's ~3 ms.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import ClassVar

import redis

from ghostless.core.errors import AttemptEnded, LeaseLost, TaskCancelled
from ghostless.execution import runtime

from .context import TaskContext

log = logging.getLogger("ghostless.heartbeat")
POLL = 0.1  # how often the thread looks at its flags; heartbeats themselves go at lease / 3


class Heartbeat:
    def __init__(self, engine, ctx: TaskContext, force_stop, grace: float = 10.0, max_failures: int = 3):
        self.engine, self.ctx, self.force_stop = engine, ctx, force_stop
        self.grace, self.max_failures = grace, max_failures
        self.interval = ctx.lease.lease / 3
        self.lost = False  # the lease is gone (cancelled, reclaimed): never report
        self.abandoned = False  # Redis unreachable past the lease: give up locally, never report
        self._done = threading.Event()
        self._stop_at: float | None = None  # monotonic time of the forced stop
        self._forced = False
        self._stop_reason = ""

    def start(self) -> None:
        """Start beating, on an idle heartbeat thread of this process or a new one."""
        _Beater.take().give(self)

    def stop(self) -> None:
        """The function returned: stop beating (the thread waits for the next attempt)."""
        self._done.set()

    def run(self) -> None:
        last_ok = next_beat = time.monotonic()  # the claim has just renewed the lease
        next_beat += self.interval
        failures = 0
        lease = self.ctx.lease.lease
        while not self._done.wait(POLL):
            now = time.monotonic()
            if runtime.shutdown_requested.is_set() and not self._stop_at:
                # Not a cancellation: the function may still finish (and be reported) within the grace.
                self._schedule("release", now + max(0.0, self.grace - (runtime.shutdown_elapsed() or 0)))
            if self._stop_at is not None and now >= self._stop_at and not self._forced:
                log.warning(
                    "task %s did not stop within %.1fs: stopping it by force (%s)",
                    self.ctx.task_id,
                    self.grace,
                    self._stop_reason,
                )
                self._forced = True
                self.force_stop(self._stop_reason)  # a work-horse ends here
                # In the worker process the stop lands when the function next runs Python code (a
                # call blocked in C returns first): the lease is kept renewed until it has
                # stopped, or another worker would take the task while this attempt still runs.
            if now < next_beat or self.lost or self.abandoned:
                continue
            next_beat = now + self.interval
            try:
                self.engine.heartbeat(self.ctx.lease)
                last_ok, failures = now, 0
            except AttemptEnded:
                self._done.set()  # in flight as the attempt reported its outcome: nothing to renew
            except TaskCancelled:
                self._lose("cancelled")
            except LeaseLost as e:
                self._lose(f"lease lost ({e.state or 'gone'})")
            except Exception as e:  # this thread must outlive any error, or nothing stops the task
                # Unreachable, but also full (OOM under noeviction), read-only after a failover, or
                # a bug: the lease is not being renewed all the same.
                unreachable = isinstance(e, (redis.ConnectionError, redis.TimeoutError))
                failures += 1
                log.warning(
                    "heartbeat of task %s failed (%d): %s",
                    self.ctx.task_id,
                    failures,
                    e,
                    exc_info=not isinstance(e, redis.RedisError),
                )
                if failures >= self.max_failures or time.monotonic() - last_ok >= lease:
                    self._abandon(last_ok, "redis unreachable" if unreachable else f"heartbeat failing: {e}")

    def _abandon(self, last_ok: float, reason: str) -> None:
        """Give the attempt up (never report it): stop now, by force at lease + grace after the
        last renewal."""
        self.abandoned = True
        self.ctx.cancel(reason)
        self._schedule("abandoned", last_ok + self.ctx.lease.lease + self.grace)

    def _lose(self, reason: str) -> None:
        log.warning("task %s: %s; asking the function to stop", self.ctx.task_id, reason)
        self.lost = True
        self.ctx.cancel(reason)
        self._schedule(reason, time.monotonic() + self.grace)

    def _schedule(self, reason: str, at: float) -> None:
        """Stop by force at monotonic time ``at``, or earlier if an earlier stop is already due
        (an attempt abandoned during a shutdown's grace still stops by lease + grace)."""
        if self._stop_at is None or at < self._stop_at:
            self._stop_reason = reason
            self._stop_at = at


class _Beater(threading.Thread):
    """A daemon thread that runs one Heartbeat after another."""

    _idle: ClassVar[list[_Beater]] = []  # one pool per process, shared by the class
    _lock = threading.Lock()

    def __init__(self):
        super().__init__(name="ghostless-heartbeat", daemon=True)
        self._next: Heartbeat | None = None
        self._given = threading.Event()

    @classmethod
    def forget_after_fork(cls) -> None:
        """In a forked child (a work-horse): the parent's threads did not come along."""
        cls._idle, cls._lock = [], threading.Lock()

    @classmethod
    def take(cls) -> _Beater:
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        beater = cls()
        beater.start()
        return beater

    def give(self, hb: Heartbeat) -> None:
        self._next = hb
        self._given.set()

    def run(self) -> None:
        while True:
            self._given.wait()
            self._given.clear()
            hb, self._next = self._next, None
            try:
                hb.run()
            except Exception:  # a bug here must not leave a dead thread among the idle ones
                log.exception("heartbeat of task %s ended by an error", hb.ctx.task_id)
            with self._lock:
                self._idle.append(self)


os.register_at_fork(after_in_child=_Beater.forget_after_fork)
