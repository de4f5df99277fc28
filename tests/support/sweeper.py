"""A sweeper thread in the test process that has looked once and sleeps (``interval`` 60 s): what
wakes it early is the test's subject (engine/core/sweep.py's wake-up channel)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

from ghostless.core.sweep import run_sweeper
from tests.support.wait import wait_until


@contextmanager
def sleeping_sweeper(engine, interval: float = 60.0):
    """Run ``run_sweeper(engine)`` in a thread; enter once its first look (the due script) is done;
    stop and join it on exit."""
    looks = []
    due = engine.scripts.due
    engine.scripts.due = lambda *a, **kw: looks.append(1) or due(*a, **kw)
    stop = threading.Event()
    sweeper = threading.Thread(target=run_sweeper, args=(engine,), kwargs={"interval": interval, "stop": stop})
    sweeper.start()
    try:
        wait_until(lambda: looks, 5, what="the sweeper's first look")
        yield sweeper
    finally:
        stop.set()
        sweeper.join(10)
        engine.scripts.due = due
    assert not sweeper.is_alive()
