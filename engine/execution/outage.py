"""How a worker process rides out Redis failing: unreachable, restarting, hung, full (OOM under
noeviction) or read-only after a failover.

RQ 3.0's worker loop (rq/worker/base.py: ``work``) ends the worker on almost any Redis error
outside its blocking dequeue: its own heartbeat while it watches a work-horse
(``maintain_heartbeats``), its state writes, the suspension check, the registry maintenance, the
bookkeeping before and after a job; then ``register_death`` fails too and the process exits 1,
leaving a running work-horse without its parent. This mixin makes each of those a pause instead:
the worker notes that Redis is failing (logged once per change, not once per call), waits with
backoff (0.1 s doubling to 2 s) until Redis answers a write again, and goes on by itself.

A running attempt is guarded by its own heartbeat thread meanwhile (engine/execution/heartbeat.py): it is
given up within lease + grace of its last renewal, and the sweeper takes the task over.
"""

from __future__ import annotations

import logging
import time

from rq import Queue
from rq.exceptions import StopRequested

from ghostless.core.clients import short_client
from ghostless.core.errors import REDIS_FAULTS
from ghostless.execution import runtime

log = logging.getLogger("ghostless.worker")
BACKOFF_FIRST, BACKOFF_CAP = 0.1, 2.0  # seconds between looks at a failing Redis
PROBE_TIMEOUT = 1.0  # a look at a Redis that hangs gives up after this long


class _RedisFailing(Exception):
    """Raised out of RQ's dequeue loop, whose own retries log every time and back off to 60 s."""


class RidingQueue(Queue):
    """RQ's Queue, whose dequeue hands a Redis failure to the worker's ride-out."""

    @classmethod
    def dequeue_any(cls, *args, **kwargs):
        try:
            return super().dequeue_any(*args, **kwargs)
        except REDIS_FAULTS as e:
            raise _RedisFailing(str(e)) from e


class RidesOutRedis:
    """Mixed into the worker classes before RQ's own."""

    queue_class = RidingQueue
    _failing_since: float | None = None
    _failing_with = ""
    _probe = None

    # -- the state, logged once per change ---------------------------------------------------------
    def _redis_failed(self, e: BaseException) -> None:
        kind = type(e.__cause__ if isinstance(e, _RedisFailing) and e.__cause__ else e).__name__
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning("worker %s: Redis is failing (%s: %s): riding it out", self.name, kind, e)
        elif kind != self._failing_with:
            log.warning("worker %s: Redis is still failing, now with %s: %s", self.name, kind, e)
        self._failing_with = kind
        # engine/execution/lean_rq.py: the next heartbeat and the next state are real writes
        self._beat_at = self._state_written = None

    def _redis_ok(self) -> None:
        """A write went through. After a failure, whichever call finds Redis back first (the next
        dequeue's look, or RQ's heartbeat after a job or while it watches a work-horse) puts the
        worker back in RQ's view before the failure counts as over."""
        if self._failing_since is None:
            return
        try:
            self._register_again()
        except REDIS_FAULTS as e:
            self._redis_failed(e)
            return
        log.warning("worker %s: Redis is back after %.1fs: resuming", self.name, time.monotonic() - self._failing_since)
        self._failing_since, self._failing_with = None, ""

    def _wait_for_redis(self) -> None:
        """Back off until Redis answers a write again. Raises StopRequested on a stop request."""
        delay = BACKOFF_FIRST
        while not (self._stop_requested or runtime.shutdown_requested.is_set()):
            time.sleep(delay)  # an idle worker's SIGTERM raises StopRequested in here (RQ's handler)
            delay = min(delay * 2, BACKOFF_CAP)
            try:
                if self._probe is None:  # on a cluster, made by asking a node for the slot map
                    self._probe = short_client(self.connection, PROBE_TIMEOUT)
                self._probe.ping()  # a hung Redis: fails within the probe's timeout, not RQ's minutes
                super().heartbeat()  # a write: a full Redis refuses it
            except REDIS_FAULTS as e:
                self._redis_failed(e)
                continue
            self._redis_ok()
            if self._failing_since is None:
                return
        raise StopRequested()

    def _register_again(self) -> None:
        """After a long outage the worker's hash has expired (RQ's worker TTL), or a restart
        without persistence lost it and the worker set: this worker is back in RQ's view too."""
        if self.connection.hexists(self.key, "birth"):
            return
        self.connection.delete(self.key)  # what RQ's heartbeat recreated: only `last_heartbeat`
        self.register_birth()

    # -- RQ's calls that would end the worker ------------------------------------------------------
    def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):
        while True:
            if self._failing_since is not None:
                self._wait_for_redis()
            try:
                return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            except (_RedisFailing, *REDIS_FAULTS) as e:
                self._redis_failed(e)

    def heartbeat(self, timeout=None, pipeline=None):
        if pipeline is not None:  # its pipeline's caller sees the error
            return super().heartbeat(timeout, pipeline)
        try:
            super().heartbeat(timeout)
        except REDIS_FAULTS as e:
            self._redis_failed(e)
        else:
            self._redis_ok()

    def maintain_heartbeats(self, *args):  # (job, execution) in RQ 3, (job) in RQ 2
        # While it watches a work-horse: the horse's own heartbeat thread guards the attempt.
        try:
            super().maintain_heartbeats(*args)
        except REDIS_FAULTS as e:
            self._redis_failed(e)
        else:
            self._redis_ok()

    def set_state(self, state, pipeline=None):
        if pipeline is not None:
            return super().set_state(state, pipeline)
        try:
            super().set_state(state)  # the state is kept locally first; only its record is missed
        except REDIS_FAULTS as e:
            self._redis_failed(e)

    def check_for_suspension(self, burst):
        try:
            super().check_for_suspension(burst)
        except REDIS_FAULTS as e:  # not known to be suspended: dequeueing waits for Redis anyway
            self._redis_failed(e)

    def run_maintenance_tasks(self):
        try:
            super().run_maintenance_tasks()
        except REDIS_FAULTS as e:  # RQ's registry cleaning: tried again on the next loop
            self._redis_failed(e)

    def prepare_execution(self, job):
        # Before the fork (or the simple worker's run): nothing claimed yet, so waiting is safe.
        while True:
            try:
                return super().prepare_execution(job)
            except REDIS_FAULTS as e:
                self._redis_failed(e)
                self._wait_for_redis()

    def prepare_job_execution(self, job, remove_from_intermediate_queue=False):
        while True:  # in the work-horse, before run_task claims: as above
            try:
                return super().prepare_job_execution(job, remove_from_intermediate_queue)
            except REDIS_FAULTS as e:
                self._redis_failed(e)
                self._wait_for_redis()

    def _pubsub_exception_handler(self, exc, pubsub, pubsub_thread):
        # RQ's command channel (its own thread) would log every 2 s while Redis is down.
        if not isinstance(exc, REDIS_FAULTS):
            return super()._pubsub_exception_handler(exc, pubsub, pubsub_thread)
        self._redis_failed(exc)
        time.sleep(BACKOFF_CAP)

    def register_death(self):
        try:
            super().register_death()
        except REDIS_FAULTS as e:  # the worker's key expires on its own TTL
            log.warning("worker %s: could not record its exit (%s)", self.name, e)
