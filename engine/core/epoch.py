"""The data epoch: how a process notices that Redis lost its data.

A Redis restarted without persistence (or flushed) comes back empty, and an empty Redis looks
healthy: no task breaks an invariant. So the first process to use a Redis writes a marker,
``<ns>:{@global}:epoch`` (``SET NX``: a random id and the server time), and every process
remembers the epoch it first saw. Later, the marker missing or holding another id means the
data this process worked with is gone: it says so (an error logged once, ``lost`` set for
``/readyz`` and ``/metrics``) until it is restarted.

What it can detect: a loss while a worker, a sweeper or a web process that had seen the marker
was running; and, in ``ghostless check``, a Redis without a marker while the app registers
queues or Redis still lists some (``problem``). What it cannot: a total loss followed by a
restart of every process before anyone looked (the first of them writes a new marker, as on a
brand-new Redis), and a partial loss that kept the marker (e.g. an old RDB snapshot loaded).
"""

from __future__ import annotations

import logging
import secrets
import threading

from .clock import server_ms
from .text import text_or_none

log = logging.getLogger("ghostless")
WATCH_INTERVAL = 5.0  # seconds between a long-running process's looks at the marker


class DataEpoch:
    """One process's view of the data epoch of the Redis its engine uses."""

    def __init__(self, redis, key: str):
        self.redis, self.key = redis, key
        self.seen: str | None = None  # the epoch this process first saw (None: not looked yet)
        self.lost: str | None = None  # why this process's data is gone (None: it is not)
        self._lock = threading.Lock()

    def adopt(self) -> str | None:
        """Write the marker when there is none (first use of this Redis), then remember it.
        Once this process has an epoch, a missing marker is a loss, never rewritten here."""
        if self.seen is not None:
            self.verify()
            return self.seen
        value = f"{secrets.token_hex(8)}@{server_ms(self.redis)}"
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.key, value, nx=True)
        pipe.get(self.key)
        current = text_or_none(pipe.execute()[1])
        with self._lock:
            if self.seen is None:
                self.seen = current
        return self.seen

    def verify(self) -> str | None:
        """Look at the marker: None while it is the one this process remembers, else why the data
        is lost (sticky until restart). The first look of a process remembers what it finds."""
        current = text_or_none(self.redis.get(self.key))
        with self._lock:
            if self.seen is None:
                self.seen = current
            elif current != self.seen and self.lost is None:
                self.lost = (
                    f"Redis lost its data: the data epoch marker {self.key} "
                    f"{'is gone' if current is None else 'changed'} since this process started "
                    f"(was {self.seen}; a restart without persistence, a FLUSHALL or a failover "
                    "to an empty replica): tasks written before are gone"
                )
                log.error("%s", self.lost)
        return self.lost

    def current(self) -> tuple[str | None, int | None]:
        """The marker now: (epoch id, server time in ms it was written), (None, None) without one."""
        value = text_or_none(self.redis.get(self.key))
        if value is None:
            return None, None
        epoch, _, at = value.partition("@")
        return epoch, int(at) if at.isdigit() else None

    def problem(self, queues: list[str]) -> str | None:
        """For ``ghostless check`` (a process started now): the marker missing while queues exist."""
        if self.redis.exists(self.key) or not queues:
            return None
        return (
            f"Redis holds no ghostless data marker ({self.key}) although queues exist "
            f"({', '.join(queues)}): its data was lost (a restart without persistence, a FLUSHALL) "
            "or no worker, sweeper, web process or submit has used this Redis yet"
        )

    def watch(self, interval: float | None = None, stop: threading.Event | None = None) -> threading.Thread:
        """Adopt the epoch now, then verify it every ``interval`` s (WATCH_INTERVAL) in a daemon
        thread, until ``stop`` is set (workers, the sweeper)."""
        stop = stop or threading.Event()
        interval = interval or WATCH_INTERVAL
        self._look(self.adopt)

        def run():
            while not stop.wait(interval):
                self._look(self.verify)

        thread = threading.Thread(target=run, name="ghostless-epoch", daemon=True)
        thread.start()
        return thread

    @staticmethod
    def _look(call) -> None:
        try:
            call()
        except Exception as e:  # noqa: BLE001 - Redis away or full: look again at the next interval
            log.debug("data epoch not verified: %s", e)
