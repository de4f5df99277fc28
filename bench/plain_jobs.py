"""Plain RQ job functions for the baselines (no engine import), run by bench/plain_worker.py.

The Redis connection is the one RQ gives the running job (``get_current_connection`` is gone in
RQ 2+; the job carries its connection).
"""

from __future__ import annotations

import os
import time

from rq import get_current_job

ENTERED = "bench:plain:entered:{}"
GATE = "bench:gate"


def victim(key: str, hold: float = 300.0):
    """Stamp the Redis server TIME at entry; the first run of ``key`` holds until killed."""
    r = get_current_job().connection
    sec, usec = r.time()
    run = r.incr(f"bench:plain:runs:{key}")
    r.rpush(ENTERED.format(key), f"{run} {int(sec) * 1_000_000 + int(usec)} {os.getpid()}")
    if run == 1:
        time.sleep(hold)
    return run


def noop(n=0):
    return None


def gate(n=0):
    r = get_current_job().connection
    r.incr(GATE + ":waiting")
    r.blpop([GATE], timeout=240)
