"""The sweeper registry: which sweepers are alive, by the Redis time of their last tick.

Each sweeper (``run_sweeper``) records its ticks in one sorted set (``Keys.sweepers``: name ->
server ms of its last tick), at most once per ``RECORD_EVERY`` seconds so that a busy sweeper
ticking every few milliseconds adds no load. A sweeper silent for ``KEEP`` seconds drops out of
the set (each record prunes it, and the set itself expires once every sweeper is silent), so a
dead sweeper is listed, with its age growing, for ``KEEP`` seconds and then is gone; one that stops
cleanly takes itself out at once.
``/metrics`` and ``/readyz`` read it (web/metrics.py, web/health.py).

Sweepers are named as RQ names its workers' hosts: ``<hostname>.<pid>``.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import redis

from .clock import server_ms
from .text import text

RECORD_EVERY = 1.0  # seconds: the registry's resolution (an age reads up to this much high)
KEEP = 600.0  # seconds a sweeper stays listed after its last tick
log = logging.getLogger("ghostless.sweeper")


def sweeper_name() -> str:
    """This process's sweeper name: ``<hostname>.<pid>``."""
    return f"{socket.gethostname()}.{os.getpid()}"


def record_tick(engine, name: str) -> int:
    """Record a tick of sweeper ``name`` now (Redis time); drop sweepers silent for ``KEEP``.
    Returns the tick's server time (ms). Raises redis errors."""
    now, keep_ms = server_ms(engine.redis), int(KEEP * 1000)
    key = engine.keys.sweepers()
    pipe = engine.redis.pipeline(transaction=False)
    pipe.zadd(key, {name: now})
    pipe.zremrangebyscore(key, "-inf", now - keep_ms)
    pipe.pexpire(key, keep_ms)
    pipe.execute()
    return now


def forget(engine, name: str) -> None:
    """Take sweeper ``name`` out of the registry (it stops cleanly: no age to alert on)."""
    engine.redis.zrem(engine.keys.sweepers(), name)


class TickRecorder:
    """``record()`` after each tick: writes the registry at most once per ``every`` seconds."""

    def __init__(self, engine, name: str | None = None, every: float = RECORD_EVERY):
        self.engine = engine
        self.name = name or sweeper_name()
        self.every = every
        self._last: float | None = None

    def record(self) -> None:
        """Raises no Redis error: a registry Redis refuses (full, away) must not fail the tick."""
        at = time.monotonic()
        if self._last is None or at - self._last >= self.every:
            try:
                record_tick(self.engine, self.name)
            except redis.RedisError as e:
                log.debug("sweeper: tick not recorded (%s); again next tick", e)
                return
            self._last = at


def tick_ages(engine) -> dict[str, float]:
    """Seconds since each listed sweeper's last recorded tick, by name (Redis time; {} when no
    sweeper ticked within ``KEEP``). Raises redis errors."""
    entries = engine.redis.zrange(engine.keys.sweepers(), 0, -1, withscores=True)
    now = server_ms(engine.redis)
    ages = {text(name): max(0.0, (now - score) / 1000) for name, score in entries}
    return {name: age for name, age in ages.items() if age <= KEEP}


def freshest_age(engine) -> float | None:
    """Seconds since the most recent tick of any sweeper (None: no sweeper listed)."""
    ages = tick_ages(engine)
    return min(ages.values()) if ages else None
