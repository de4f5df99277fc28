"""``ghostless worker --concurrency N``: N RQ workers under one supervisor process (RQ's
``worker-pool``, Celery's ``-c``, BullMQ's ``concurrency``).

The supervisor forks N children, each an ordinary ghostless worker (a fork worker keeps its
work-horse per attempt), so ``rq info`` lists N workers. It runs no task itself and holds no
lease:

- SIGTERM or SIGINT (Ctrl-C, ``docker stop``): forwarded once to every child as SIGTERM, a warm
  shutdown (each running attempt finishes within its grace, else is given back); the supervisor
  exits when all have stopped. A second signal more than a second later is forwarded again: a
  cold stop, as for one worker. A child that got the same signal from the terminal or the
  process group already ignores the forwarded copy (a repeat within 1 s, engine/execution/worker.py).
- A child that exits while no stop was asked (a crash, an OOM kill of the worker itself) is
  started again: at once if it had run for ``STEADY`` seconds, else after a delay that doubles
  from 1 s to ``MAX_DELAY`` (a child that cannot start does not spin). Its tasks are the
  engine's to recover (the sweeper reclaims a lease nobody renews).
- Children get SIGTERM if the supervisor dies (Linux ``PR_SET_PDEATHSIG``): no worker outlives it.
- With ``--burst`` children are not restarted; the supervisor exits when all have exited, with
  the highest exit status among them.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable

log = logging.getLogger("ghostless.worker")
STEADY = 10.0  # seconds a child must have run for its restart to be immediate
MAX_DELAY = 30.0
POLL = 0.1  # seconds between looks at the children
_PR_SET_PDEATHSIG = 1

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in each forked child
except (OSError, AttributeError):  # not Linux
    _prctl = None


class Supervisor:
    """Runs ``child(index)`` in ``count`` forked processes and keeps them running.

    ``child`` runs a worker and returns its exit status; it is called in the child process.
    """

    def __init__(self, child: Callable[[int], int], count: int, burst: bool = False):
        if count < 1:
            raise ValueError("concurrency must be at least 1")
        self.child, self.count, self.burst = child, count, burst
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (index, started at)
        self._restart_at: dict[int, float] = {}  # index -> when to start it again
        self._delays: dict[int, float] = {}
        self._stops = 0
        self._last_stop = 0.0
        self.status = 0

    def run(self) -> int:
        """Start the children, supervise them until they have all stopped; the exit status."""
        previous = {sig: signal.signal(sig, self._on_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for index in range(self.count):
                self._start(index)
            log.info("supervising %d workers (pids %s)", self.count, ", ".join(map(str, self.children)))
            while self.children or (self._restart_at and not self._stops):
                self._reap()
                self._restart_due()
                time.sleep(POLL)
            log.info("all %d workers stopped", self.count)
            return self.status
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- signals ----------------------------------------------------------------------------------
    def _on_stop(self, signum, frame) -> None:
        now = time.monotonic()
        if self._stops and now - self._last_stop < 1.0:
            return  # the same stop delivered twice (terminal and process group)
        self._stops += 1
        self._last_stop = now
        self._restart_at.clear()
        kind = "warm" if self._stops == 1 else "cold"
        log.info("%s: %s shutdown of %d workers", signal.Signals(signum).name, kind, len(self.children))
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # -- children ---------------------------------------------------------------------------------
    def _start(self, index: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the supervisor's code
            status = 1
            try:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)  # the worker installs its own
                die_with_parent()
                if os.getppid() != parent:  # it died before we asked
                    os._exit(0)
                status = self.child(index)
            except BaseException:  # whatever it was, the child ends here
                log.exception("worker %d failed", index)
            finally:
                os._exit(status or 0)
        self.children[pid] = (index, time.monotonic())

    def _reap(self) -> None:
        while self.children:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            index, started = self.children.pop(pid, (None, 0.0))
            if index is None:
                continue  # not one of ours (a library's own child)
            status = os.waitstatus_to_exitcode(raw)
            self.status = max(self.status, status if status >= 0 else 128 - status)
            if self._stops or (self.burst and status == 0):
                continue
            if self.burst:
                log.warning("worker %d (pid %d) exited with status %d", index, pid, status)
                continue
            ran = time.monotonic() - started
            delay = 0.0 if ran >= STEADY else min(MAX_DELAY, self._delays.get(index, 0.5) * 2)
            self._delays[index] = delay
            self._restart_at[index] = time.monotonic() + delay
            how = f"killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
            log.warning("worker %d (pid %d) %s after %.1f s; starting it again in %.1f s", index, pid, how, ran, delay)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for index, at in list(self._restart_at.items()):
            if at <= now and not self._stops:
                del self._restart_at[index]
                self._start(index)


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send this process ``sig`` when its parent dies; False where it cannot
    (elsewhere). Also a ``preexec_fn`` for a child started by a process's main thread (the signal
    follows the thread that forked it): engine/demo/run.py's, and the tests' (tests/support/tether.py)."""
    if _prctl is None:
        return False
    _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return True
