"""The ``ghostless scheduler`` process: rq-scheduler's loop, firing the engine's periodic tasks.

rq-scheduler 0.14 runs on RQ 3.0 (its cron, enqueue_at, schedule and run work), but
its own job store cannot give one task per period: it computes every time from the
local clock (``datetime.now()``/``utcnow()`` in ``get_next_scheduled_time`` and
``get_jobs_to_queue``), and a cron job becomes a pickled RQ job run later by a
worker, when the period may already have changed. So the tick is replaced:
``enqueue_jobs`` calls ``engine.periodic.fire_due``, which computes periods from
Redis TIME and submits with per-period idempotency keys (engine/periodic/schedules.py).
"""

from __future__ import annotations

import logging
import signal
import time

import redis as redis_lib
from rq_scheduler import Scheduler

from ghostless.core.clock import retry_delay
from ghostless.periodic.schedules import Firing, fire_due

log = logging.getLogger("ghostless.scheduler")
# The lock only spares the other schedulers duplicate work (idempotency keys make the firings
# correct without it), so it is short: one killed while holding it delays the others this long.
# rq-scheduler's own (interval + 10 s) stalled every scheduler for 10 s after such a kill.
LOCK_TTL = 2.0


class PeriodicScheduler(Scheduler):
    """rq-scheduler's Scheduler whose tick fires the engine's schedules.

    Kept from rq-scheduler: ``run`` (birth and death registered under
    ``rq:scheduler_instance:<name>``, a heartbeat, one tick per ``interval`` under a
    SET NX lock, so that of several schedulers one works at a time). Replaced: the tick
    (``enqueue_jobs``); the lock's name (per namespace, so that ghostless and a plain
    rqscheduler on one Redis do not wait for each other) and lifetime (LOCK_TTL); and
    the signal handler, which must not need Redis to stop.
    """

    def __init__(self, engine, interval: float = 1.0, name: str | None = None):
        super().__init__(connection=engine.redis, interval=interval, name=name)
        self.engine = engine
        self.scheduler_lock_key = engine.keys.scheduler_lock()
        self.stopping = False
        self.firings: list[Firing] = []

    def acquire_lock(self) -> bool:
        self._lock_acquired = bool(
            self.connection.set(self.scheduler_lock_key, self.name, px=int(LOCK_TTL * 1000), nx=True)
        )
        return self._lock_acquired

    def enqueue_jobs(self) -> list[Firing]:
        self.firings = fire_due(self.engine)
        return self.firings

    def _install_signal_handlers(self) -> None:
        # rq-scheduler's handler writes to Redis, which may be what is down; run()'s
        # `finally` registers the death and drops the lock anyway.
        def stop(signum, frame):
            self.stopping = True
            log.info("scheduler %s: stopping", self.name)
            raise SystemExit(0)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)


def run_scheduler(engine, interval: float = 1.0, burst: bool = False) -> None:
    """Run a PeriodicScheduler until SIGTERM/SIGINT (with ``burst``: until one tick has run).

    Redis being unreachable is logged and retried with backoff: the loop never dies of it.
    """
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    errors = 0
    try:
        while True:
            scheduler = PeriodicScheduler(engine, interval)
            try:
                scheduler.run(burst=burst)
                return
            except (redis_lib.ConnectionError, redis_lib.TimeoutError) as e:
                if scheduler.stopping:
                    return
                errors += 1
                log.warning("scheduler: Redis unreachable (%s); retrying", e)
                time.sleep(retry_delay(errors, max(interval, 0.1)))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
