"""Children that end with the test or benchmark process that started them, even one SIGKILLed.

A worker, a sweeper or a redis-server started by a test outlives a pytest (or a benchmark) killed by
SIGKILL, as a CI timeout or an impatient user does: nothing runs its ``finally``. On Linux the
kernel can send the child a signal when its parent ends (``prctl(PR_SET_PDEATHSIG)``, kept across
the exec; the worker supervisor's ``die_with_parent``). That "parent" is the thread that started
the child, not the process: a child started by a helper thread would be killed when that thread
ends (a chaos run restarts its servers from one). So only a child started by the main thread is
tethered; the others are left as before.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

from ghostless.execution.supervisor import die_with_parent

TETHERS = sys.platform.startswith("linux")  # PR_SET_PDEATHSIG is Linux's


def tether(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when this process ends.

    None (no ``preexec_fn``) off Linux and on any thread but the main one.
    """
    if not TETHERS or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def preexec() -> None:
        die_with_parent(sig)
        if os.getppid() != parent:  # the parent ended between the fork and the prctl
            os._exit(1)

    return preexec
