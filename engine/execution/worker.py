"""RQ worker classes wired to the engine, and ``run_worker`` (behind worker.py and
``ghostless worker``).

- ``fork`` (default): each attempt runs in a forked work-horse. If the horse dies
  (OOM kill, segfault), the parent reports it at once with the lease's token:
  a retryable failure ``worker_lost`` that is dispatched again immediately.
- ``simple``: attempts run in the worker process itself (no isolation).

Shutdown: the first SIGTERM lets the running attempt finish within the grace
period, then releases it (PROCESSING -> PENDING, no attempt consumed); a second
SIGTERM stops at once, releasing the lease on the way out.
"""

from __future__ import annotations

import logging
import os
import signal
from datetime import timedelta

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from rq import SimpleWorker, Worker
from rq.serializers import DefaultSerializer, JSONSerializer, resolve_serializer
from rq.utils import now

from ghostless.core import tracing
from ghostless.core.clients import client_like, no_resends
from ghostless.core.errors import REDIS_FAULTS, GhostlessError
from ghostless.core.ids import new_claim_id, new_worker_name
from ghostless.core.keys import rq_dispatch_id, rq_queue_prefix, rq_wake_channel
from ghostless.core.logs import failed_for_good, for_task
from ghostless.core.states import State
from ghostless.core.text import text_or_none
from ghostless.execution import (
    runner,  # imported here, not in every work-horse (~4 ms a job)
    runtime,
)

from .lean_rq import LeanRQ
from .outage import RidesOutRedis
from .rq_cluster import ClusterConnection, ClusterJob, ClusterQueue, is_cluster, rq_cluster_connection
from .rq_dispatch import rq_queue_name

log = logging.getLogger("ghostless.worker")
WORKER_CLASSES = ("fork", "simple")
REDIS_RETRIES = 14  # with ExponentialBackoff(cap=1 s, base=50 ms): about 10 s of resends


class _EngineHooks(ClusterConnection, RidesOutRedis, LeanRQ):
    """What both worker classes add to RQ's: a claim id per job, reports for lost attempts,
    riding out Redis failures (engine/execution/outage.py) and RQ's own records of a job in 9
    round trips where RQ makes 20 (engine/execution/lean_rq.py)."""

    engine = None
    claim_id: str | None = None
    _task_id: str | None = None

    legacy_queues: frozenset = frozenset()  # plain RQ queues served as RQ would (build_worker)
    legacy_serializer = None

    def execute_job(self, job, queue):
        if queue.name in self.legacy_queues:  # a plain RQ job: RQ's own execution, no task behind it
            job.serializer = self.legacy_serializer  # its data is only read from here on (lazily)
            self.claim_id = self._task_id = None
            return super().execute_job(job, queue)
        # Made before the fork, so the parent knows which claim its horse made.
        self.claim_id = new_claim_id()
        self._task_id = job.args[0] if job.args else None
        self._dispatch_id = rq_dispatch_id(job.id)
        runtime.new_job()
        try:
            super().execute_job(job, queue)
        except REDIS_FAULTS as e:  # RQ's bookkeeping around the job: the attempt reports on its own
            self._redis_failed(e)
            self._outlive_horse()
        finally:
            self._task_id = None

    def handle_exception(self, job, *exc_info):
        """RQ logs a failed job with its traceback, then calls its exception handlers (and what
        wraps this method: Sentry's RQ integration) with it. An attempt's failure reaches RQ as
        AttemptFailed, raised by the runner once the failure is recorded and logged (with the
        task's own traceback once it has failed for good). What RQ is given instead, with no
        traceback (its frames would be ghostless's, or logged already):

        - an attempt the engine will retry: the AttemptFailed, with ``job.retries_left`` set to the
          attempts the task may still make for as long as the handlers run, as RQ marks a job its
          ``Retry`` will run again (Sentry's integration reports no such failure). Put back after:
          RQ's own retry, which reads it next, must not run;
        - the attempt after which the task failed for good: the exception its function raised
          (its ``__traceback__`` holds where), unless it chains another (RQ would print that one's
          frames: logged already), else the AttemptFailed. The failure lets go of it afterwards:
          RQ 2.8 keeps the failure's traceback, and so the task's frames, until a collection."""
        failed = exc_info[1]
        if not isinstance(failed, runner.AttemptFailed):
            return super().handle_exception(job, *exc_info)
        if failed.final:
            error = failed.error if _unchained(failed.error) else failed
            try:
                return super().handle_exception(job, type(error), error, None)
            finally:
                failed.error = None
        retries_left = job.retries_left
        job.retries_left = failed.attempts_left
        try:
            return super().handle_exception(job, exc_info[0], failed, None)
        finally:
            job.retries_left = retries_left

    def _outlive_horse(self) -> None:
        """Never leave a work-horse without its parent: wait for it (its heartbeat thread ends
        an attempt that cannot reach Redis within lease + grace)."""
        if getattr(self, "horse_pid", 0):
            _, status, _ = self.wait_for_horse()
            self._horse_pid = 0
            if status:
                self._report_lost(
                    f"work-horse exited with status {os.waitstatus_to_exitcode(status)}",
                    release=runtime.shutdown_requested.is_set(),
                )

    def _set_ip_address(self, connection) -> None:
        # The embedded demo server (engine/demo/fakeserver.py: fakeredis over TCP) writes CLIENT INFO's
        # addr as a Python tuple, "addr=('127.0.0.1', 5)": the space breaks redis-py's parser, a
        # ValueError RQ does not expect. CLIENT LIST parses; real Redis never raises this.
        try:
            super()._set_ip_address(connection)
        except ValueError:
            mine = [c.get("addr") for c in connection.client_list() if c.get("name") == self.name]
            self.ip_address = str(mine[0]) if mine else "unknown"

    def _report_lost(self, why: str, release: bool) -> None:
        """Report the attempt our horse held (if it still holds it) on its behalf: of the task its job
        names, or of the one its claim took instead (runtime.claimed: the head of the line)."""
        if not self._task_id or not self.claim_id:
            return
        try:
            lease = self.engine.lease_for_claim(runtime.claimed() or self._task_id, self.claim_id)
            if lease is None:
                # The horse reported itself, or the lease was taken away, or the horse died
                # before its claim: then the task is still QUEUED under this job, which is gone.
                self._redispatch_unclaimed()
                return
            if release:
                self.engine.release(lease, why)
            elif self.engine.fail(lease, "worker_lost", why, retryable=True, retry_in=0) == State.FAILED:
                failed_for_good(log, lease.task_id, f"worker_lost: {why}", lease.attempt)  # its last attempt
                return
            log.warning(
                "task %s: %s (%s)",
                lease.task_id,
                "released" if release else "reported lost",
                why,
                extra=for_task(lease.task_id, lease.attempt),
            )
        except (GhostlessError, OSError, redis.RedisError) as e:
            log.warning("could not report task %s after %s: %s", self._task_id, why, e, extra=for_task(self._task_id))

    def _redispatch_unclaimed(self) -> None:
        row = self.engine.redis.hmget(self.engine.keys.task(self._task_id).task, "status", "dispatch_id")
        status, dispatch_id = (text_or_none(v) for v in row)
        if status == "QUEUED" and dispatch_id == getattr(self, "_dispatch_id", None):
            self.engine.dispatch(self._task_id)
            log.warning(
                "task %s: its job died before the claim; dispatched again", self._task_id, extra=for_task(self._task_id)
            )


class GhostlessWorker(_EngineHooks, Worker):
    """Fork worker: isolation per attempt, instant report of a dead work-horse."""

    def main_work_horse(self, job, queue):
        # In the horse, RQ's few short commands go through the engine's pool: one new connection
        # per horse instead of two. (The parent keeps its own pool for RQ, whose blocking dequeue
        # needs a long socket timeout: see rq_connection.)
        pool = getattr(self.engine.redis, "connection_pool", None)
        if isinstance(pool, redis.ConnectionPool) and self.connection is not self.engine.redis:
            self.connection.connection_pool = pool
        super().main_work_horse(job, queue)

    def setup_work_horse_signals(self):
        super().setup_work_horse_signals()
        # The parent forwards a warm shutdown as SIGUSR1. A SIGTERM sent to the whole process group
        # or cgroup (systemd's default, docker stop of a container) reaches the horse too: the same
        # grace, not an instant death. A cold stop kills the horse with SIGKILL.
        signal.signal(signal.SIGUSR1, lambda *_: runtime.request_shutdown())
        signal.signal(signal.SIGTERM, lambda *_: runtime.request_shutdown())

    def handle_work_horse_killed(self, job, retpid, ret_val, rusage):
        super().handle_work_horse_killed(job, retpid, ret_val, rusage)
        if ret_val and os.WIFSIGNALED(ret_val):
            why = f"work-horse killed by {signal.Signals(os.WTERMSIG(ret_val)).name}"
        else:
            why = f"work-horse exited with status {os.waitstatus_to_exitcode(ret_val) if ret_val else ret_val}"
        self._report_lost(why, release=runtime.shutdown_requested.is_set())

    def handle_warm_shutdown_request(self):
        runtime.request_shutdown()
        if self.horse_pid:
            try:
                os.kill(self.horse_pid, signal.SIGUSR1)  # the horse's heartbeat thread runs the grace
            except ProcessLookupError:
                pass

    def request_force_stop(self, signum, frame):
        # RQ ignores a repeat within 1 s of the first signal (one SIGTERM delivered twice, by a
        # pool and by the terminal): so must we, or the duplicate would kill the horse.
        requested = self._shutdown_requested_date
        if requested is not None and now() - requested < timedelta(seconds=1):
            return super().request_force_stop(signum, frame)
        if self.horse_pid:
            self.kill_horse()
            self.wait_for_horse()
            self._report_lost("worker stopped", release=True)
        super().request_force_stop(signum, frame)


class GhostlessSimpleWorker(_EngineHooks, SimpleWorker):
    """Runs attempts in the worker process; a forced stop interrupts the function."""

    def handle_warm_shutdown_request(self):
        runtime.request_shutdown()


def ride_out_redis_restarts(client, retries: int = REDIS_RETRIES) -> None:
    """Resend an engine command that met a connection error, with backoff (about 10 s in all).

    A work-horse's outcome report (complete, fail, release) then rides out a Redis restart or
    failover instead of being lost; every ghostless script is idempotent to a resend (a repeated
    claim, complete, fail or release answers REPLAYED: lua/claim.lua, lua/lib/lease.lua). A longer
    outage still raises, and the heartbeat thread abandons
    the attempt. Timeouts are not resent; heartbeats go on a client of their own without
    resends (Engine.heartbeat), so a Redis that hangs reaches the heartbeat thread within the lease.
    """
    if hasattr(client, "set_retry"):
        client.set_retry(
            Retry(ExponentialBackoff(cap=1.0, base=0.05), retries, supported_errors=(redis.ConnectionError,))
        )


def resolve_driver_info_once(client) -> None:
    """Give the client's pool one resolved DriverInfo for every connection it will open.

    redis-py (8.x) otherwise resolves its own version for each new connection by reading and
    parsing its package metadata from disk (``importlib.metadata.version``: about 1 ms). A
    fork worker's work-horse opens its connections afresh for every job, so every job paid
    that twice (its engine connection and RQ's). Resolved here, in the worker's parent, once.
    """
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict) or "driver_info" in kwargs:  # set by the user (None: no CLIENT SETINFO)
        return
    try:
        from redis.driver_info import resolve_driver_info
        from redis.utils import SENTINEL
    except ImportError:  # a redis-py without DriverInfo: nothing to resolve
        return
    kwargs["driver_info"] = resolve_driver_info(
        SENTINEL, kwargs.pop("lib_name", SENTINEL), kwargs.pop("lib_version", SENTINEL)
    )


def rq_connection(client, namespace: str):
    """A client of its own for RQ, on the same server and settings, without resends.

    RQ raises its connection's socket timeout above its blocking dequeue (minutes). On a
    shared pool, the engine's calls would inherit it: a call to a Redis that hangs (network
    partition) would block for minutes instead of failing within the engine's socket timeout.
    No resends: the worker rides out a failing Redis itself (engine/execution/outage.py), and a resending
    RQ call would keep it from watching its work-horse for ~10 s at a time.
    """
    return rq_cluster_connection(client_like(client, **no_resends()), rq_wake_channel(namespace))


def worker_queues(engine, queues: list[str] | None, worker_class: str) -> list[str]:
    """The queues a worker of ``worker_class`` serves (default: every registered queue); ValueError
    for an unknown class or no queue at all."""
    if worker_class not in WORKER_CLASSES:
        raise ValueError(f"worker class must be one of {', '.join(WORKER_CLASSES)}")
    names = queues or engine.registry.queues()
    if not names:
        raise ValueError("no queues: register task types in the app or name queues on the command line")
    return names


def _unchained(error: BaseException | None) -> bool:
    """Whether ``error`` is an exception that names no other (no cause, no context shown)."""
    return error is not None and error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def build_worker(
    engine,
    queues: list[str] | None = None,
    worker_class: str = "fork",
    name: str | None = None,
    rq_queues: list[str] | None = None,
    rq_serializer: str = "pickle",
    **kwargs,
):
    """An RQ worker for the engine's ``queues`` (default: every registered one) and, after them,
    the plain RQ queues ``rq_queues``, whose jobs it runs as RQ would (their data read with
    ``rq_serializer``: RQ's default, pickle, or ``json`` or a dotted path)."""
    names = worker_queues(engine, queues, worker_class)
    legacy = plain_rq_queues(engine, rq_queues)
    cls = GhostlessWorker if worker_class == "fork" else GhostlessSimpleWorker
    ride_out_redis_restarts(engine.redis)
    resolve_driver_info_once(engine.redis)
    tracing.warm()  # imported once here, not in every work-horse
    # One RQ queue per queue, in the order given, as RQ takes them: BLPOP takes the first non-empty
    # list (on a Cluster, ClusterQueue.lpop keeps that order across slots). Each job's claim takes
    # its queue's next task in priority order (lua/claim.lua).
    cluster = is_cluster(engine.redis)
    lists = [rq_queue_name(engine.keys.ns, q, tagged=cluster) for q in names] + legacy
    if cluster:
        kwargs = {"queue_class": ClusterQueue, "job_class": ClusterJob, **kwargs}
    worker = cls(
        lists,
        connection=rq_connection(engine.redis, engine.keys.ns),
        name=name or new_worker_name(),
        serializer=JSONSerializer,
        job_monitoring_interval=2,
        **kwargs,
    )
    worker.engine = engine
    worker.legacy_queues = frozenset(legacy)
    worker.legacy_serializer = plain_rq_serializer(rq_serializer)
    runtime.install(engine, worker)
    return worker


#: ``--rq-serializer`` names (RQ 2.x's resolve_serializer knows no aliases): RQ's default, pickle, and JSON
SERIALIZERS = {"pickle": DefaultSerializer, "json": JSONSerializer}


def plain_rq_serializer(name: str):
    """The serializer plain RQ jobs were enqueued with: ``pickle`` (RQ's default), ``json``, or a
    dotted path to one. ValueError (or ImportError) for a name that is none of them."""
    return SERIALIZERS.get(name) or resolve_serializer(name)


def plain_rq_queues(engine, rq_queues: list[str] | None) -> list[str]:
    """``rq_queues`` checked: plain RQ queue names that are not ghostless's own lists; ValueError
    otherwise, or on a Redis Cluster (RQ's own key layout does not run on one)."""
    legacy = list(dict.fromkeys(rq_queues or []))
    if legacy and is_cluster(engine.redis):
        raise ValueError("--rq-queue: plain RQ queues cannot be served on a Redis Cluster (RQ's keys span slots)")
    prefix = rq_queue_prefix(engine.keys.ns)
    for name in legacy:
        if not name or name.startswith(prefix) or any(c.isspace() for c in name):
            raise ValueError(f"--rq-queue {name!r}: not a plain RQ queue name (ghostless's own start with {prefix!r})")
    return legacy


def run_worker(
    engine,
    queues: list[str] | None = None,
    worker_class: str = "fork",
    burst: bool = False,
    name: str | None = None,
    logging_level: str = "INFO",
    rq_queues: list[str] | None = None,
    rq_serializer: str = "pickle",
) -> bool:
    """Start an RQ worker for the engine's queues (all registered ones by default) and the plain
    RQ queues ``rq_queues`` (build_worker)."""
    worker = build_worker(engine, queues, worker_class, name, rq_queues=rq_queues, rq_serializer=rq_serializer)
    return worker.work(burst=burst, logging_level=logging_level, with_scheduler=False)
