"""The Engine: the Python API over the task scripts.

Every state change is one script call (engine/core/scripts.py). This module checks
input, builds keys, and turns replies into Task, Lease and Event objects. The client calls
(submit, the reads, cancel, edit, retry, wait) are written once as steps (engine/core/steps.py):
the Engine runs them on redis-py here, the AsyncEngine (engine/core/aio.py) on redis.asyncio.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ghostless.core import (
    check as check_mod,
    dependencies as deps,
    dispatch as dispatch_mod,
    listing,
    notify,
    stats as stats_mod,
    submit_call,
    sweep as sweep_mod,
    tracing,
    waiting,
)

from .claim_calls import ClaimCalls
from .cluster import is_cluster
from .config import Config, ms
from .connect import connect
from .dispatch import Dispatcher, NullDispatcher
from .epoch import DataEpoch
from .errors import Code, TaskNotFound, refusing_full
from .keys import Keys, parse_task_id
from .lease_calls import LeaseCalls
from .management import Management
from .models import Task
from .plans import Plan
from .quota import Quota
from .rates import Rate
from .reads import Reads
from .registry import Breaker, Registry, TaskType, as_backoff
from .scripts import Scripts
from .server import check_server
from .steps import Blocking, Command, Commands, Events, ReadTasks, sync_call
from .text import text, text_or_none
from .users import Users
from .validate import json_text as _json_text, text as _text

#: verbs the layers above the core supply (``periodic``: ghostless.periodic.schedules.register).
EXTENSIONS: dict = {}


class Engine(ClaimCalls, LeaseCalls, Management, Reads):
    """A ghostless engine bound to one Redis and one namespace.

    Args:
        redis: a redis-py client (``decode_responses`` either way) or fakeredis.
        namespace: prefix of every key (``gl`` -> ``gl:{queue}:...``).
        config: retention, caps and timings (engine/core/config.py).
        dispatcher: the executor hook (engine/core/dispatch.py): ``"rq"`` (default) enqueues an RQ job
            per dispatch; ``None`` leaves tasks in PENDING for direct claims.
        strict: raise instead of warning when Redis may evict keys.
    """

    def __init__(
        self,
        redis,
        namespace: str = "gl",
        config: Config | None = None,
        dispatcher: Dispatcher | str | None = "rq",
        strict: bool = False,
        check: bool = True,
    ):
        self.redis = redis
        self.keys = Keys(namespace, cluster=is_cluster(redis))
        self.config = config or Config()
        self.registry = Registry()
        if isinstance(dispatcher, str):  # "rq": registered by ghostless.execution (engine/core/dispatch.py)
            dispatcher = dispatch_mod.make(dispatcher, redis, namespace)
        self.dispatcher = dispatcher or NullDispatcher()
        self.scripts = Scripts(redis, self.config, on_resolve=lambda key: deps.resolve_due(self, key))
        self._known_queues: set[str] = set()
        self._unreported: dict[str, str] = {}  # lost jobs not yet reported: task id -> dispatch id
        self._webhook_cache = None
        self.users = Users(redis, self.keys, self.scripts)
        #: notices a Redis that lost its data (engine/core/epoch.py); adopted at the first submit
        self.data_epoch = DataEpoch(redis, self.keys.data_epoch())
        if check:
            check_server(redis, strict=strict)

    @classmethod
    def from_url(cls, url: str | None = None, **kwargs) -> Engine:
        """An engine on the Redis at ``url``; without one, ``GHOSTLESS_REDIS_URL`` or the local default.
        Any URL form of engine/core/connect.py: ``redis://``, ``rediss://``, ``unix://``,
        ``redis+cluster://`` and ``redis+sentinel://``. Raises BadRedisURL for a malformed one."""
        return cls(connect(url), **kwargs)

    # -- registry ---------------------------------------------------------------------------------
    def task(
        self,
        name: str | None = None,
        *,
        queue: str = "default",
        timeout: float = 600.0,
        lease: float = 15.0,
        max_attempts: int = 3,
        backoff=None,
        stages=None,
        permanent_errors=(),
        breaker: Breaker | bool | None = None,
        upstream: str = "",
        rate: str | Rate | None = None,
        verify: Callable | None = None,
        internal: bool = False,
    ) -> Callable:
        """Decorator registering a task type (the allowlist of what may be submitted and run).

        ``breaker`` (a Breaker, or True for the defaults; implied by ``upstream``) guards the
        upstream the type calls; types naming the same ``upstream`` share one breaker. ``rate``
        (``"20/s"``, ``"600/min"``, ``"1000/h"``: engine/core/rates.py) caps the attempts of the
        upstream (default: of the type) that start in any such window, across every worker; its
        types must give the same rate, in one queue. Raises BadRate, ValueError.
        ``verify(result, ctx)`` checks a result before SUCCESS is recorded: returning False or
        raising fails the attempt (``verification_failed``, retried). ``internal`` types (and every
        ``ghostless.*`` one) are submitted by engine code only: ``submit(..., internal=True)``.
        """
        if breaker is True or (upstream and breaker is None):
            breaker = Breaker()
        limit = Rate.parse(rate) if rate is not None else None  # BadRate now, not at the decoration

        def register(fn: Callable) -> Callable:
            self.registry.add(
                TaskType(
                    name=name or fn.__name__,
                    fn=fn,
                    queue=queue,
                    timeout=timeout,
                    lease=lease,
                    max_attempts=max_attempts,
                    backoff=as_backoff(backoff),
                    stages=dict(stages or {}),
                    permanent_errors=tuple(permanent_errors),
                    breaker=breaker or None,
                    upstream=upstream,
                    rate=limit,
                    verify=verify,
                    internal=internal,
                )
            )
            return fn

        return register

    def periodic(self, name: str, **kwargs):
        """``engine.periodic(name, cron=..., args=...)``: register a periodic task. The periodic layer
        does it (engine/periodic/schedules.py ``register``; it installs itself in ``EXTENSIONS``)."""
        return EXTENSIONS["periodic"](self, name, **kwargs)

    queues = sync_call(listing.queues)

    # -- client calls (written once as steps: engine/core/steps.py; the AsyncEngine runs them too) --
    submit = tracing.traced_submit(sync_call(submit_call.submit))

    def _do(self, step):
        """One step of a client call (engine/core/steps.py), done on this engine's redis-py client."""
        if isinstance(step, Plan):
            return self.scripts.run(step)
        if isinstance(step, Command):
            return getattr(self.redis, step.name)(*step.args, **step.kwargs)
        if isinstance(step, Commands):
            return step.queued(self.redis.pipeline(transaction=False)).execute()
        if isinstance(step, ReadTasks):
            return self.scripts.read(*step)
        if isinstance(step, Events):
            return waiting.next_events(self.redis, step)
        if isinstance(step, Blocking):
            return step.fn(*step.args)
        return self.redis  # CLIENT

    def dispatch(self, task_id: str) -> str | None:
        """Record PENDING -> QUEUED with a new dispatch id, then create the executor job of that id.
        Returns the dispatch id (None, and nothing done, while the queue drains or the task waits
        on its parents).

        A crash between the two leaves a QUEUED task without a job in the ``dispatch`` set: the
        sweeper finds no job at its check (``Config.requeue_after``) and dispatches it again; the
        claim refuses whichever delivery is not current. Raises TaskNotFound, UnknownTaskType,
        IllegalTransition.
        """
        type_name = self.redis.hget(self._keys(task_id).task, "type")
        if type_name is None:
            raise TaskNotFound(task_id)
        return self.dispatch_known(task_id, self.registry.get(text_or_none(type_name)))

    def dispatch_known(
        self, task_id: str, tt: TaskType, seen_score: float | None = None, passed: str = ""
    ) -> str | None:
        """``dispatch`` when the caller knows the task's type. Returns None (nothing done) while its
        queue drains or it waits on parents, or (``seen_score``: a sweeper's compare-and-set) when
        it is no longer due at that score. A task returning from a lost attempt goes to the head of
        its priority in the ready line, whose head a job's claim may take (lua/claim.lua). With
        ``passed`` (the dispatch a claim spent taking the head instead of this task): only if it is
        still so, keeping its place in line, its job at the front of the executor's queue. A failed
        enqueue is reported (``job_lost``) and raised (RedisFull when Redis refused the write)."""
        return self._dispatch_in(task_id, tt.queue, seen_score, passed)

    def _dispatch_in(self, task_id: str, queue: str, seen_score: float | None = None, passed: str = "") -> str | None:
        """``dispatch_known`` by the task's queue. The job's timeout is the longest of the queue's
        types (Registry.queue_timeout): its claim may start another task of the queue (lua/claim.lua)."""
        dispatch_id = uuid.uuid4().hex
        # Recorded first: a worker that takes the job at once must find its dispatch id current
        # (enqueue-then-record let an idle worker's claim arrive first and be refused). The script
        # also answers the draining switch, so checking it costs no round trip.
        reply = self.scripts.dispatch(
            self.keys.task(task_id),
            self.keys.queue_key(queue, "control"),
            task_id,
            dispatch_id,
            ms(self.config.requeue_after),
            seen_score,
            passed=passed,
        )
        if reply[0] == Code.NOT_DUE:
            return None
        try:
            with refusing_full(f"enqueue of task {task_id}"):
                # Its own, which a process that does not run its type (passing it over) may not know.
                timeout = max(self.registry.queue_timeout(queue), _own_timeout(reply))
                self.dispatcher.enqueue(task_id, queue, dispatch_id, timeout, at_front=_kept_place(reply))
        except Exception:
            self.job_lost(task_id, dispatch_id)
            raise
        return dispatch_id

    def enable_notifications(self, secret: str, **options) -> None:
        """Register webhook delivery (engine/core/notify.py): ``secret`` signs every request."""
        notify.enable(self, secret, **options)

    def set_webhook(self, owner: str, url: str | None) -> None:
        """Set (or with None, remove) an owner's default webhook for their new tasks."""
        owner = _text("owner", owner)
        with refusing_full("webhook setting"):
            if url is None:
                self.redis.hdel(self.keys.webhooks(), owner)
            else:
                self.redis.hset(self.keys.webhooks(), owner, notify.check_url(url))
        self._webhook_cache = None

    def resolve(self, task_id: str) -> str | None:
        """Look at a waiting task's parents now (the engine and sweeper do this for you):
        'ready' (dispatched), 'delayed' (ready once its submit's delay passes), 'cancelled', or None
        while a parent is still running."""
        self._keys(task_id)
        return deps.resolve(self, task_id)

    # -- operations -------------------------------------------------------------------------------
    def sweep(self, batch: int = 1000) -> sweep_mod.SweepReport:
        """One sweeper tick over every queue: expire, promote, re-dispatch, purge what is due."""
        return sweep_mod.sweep(self, batch)

    def stats(self) -> dict:
        """Counts per queue and state, time in state, failure reasons, stale rejections."""
        return stats_mod.stats(self)

    def check(self) -> list[str]:
        """Invariant violations found by a scan; an empty list when healthy."""
        return check_mod.check(self)

    # -- helpers ----------------------------------------------------------------------------------
    def _keys(self, task_id: str):
        if parse_task_id(task_id) is None:
            raise TaskNotFound(str(task_id))
        return self.keys.task(task_id)

    def _require(self, task_id: str) -> Task:
        task = self.get(task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def _remember_queue(self, queue: str) -> None:
        if queue not in self._known_queues:
            with refusing_full("registering queue " + queue):
                self.redis.sadd(self.keys.queues(), queue)
                if self.data_epoch.seen is None:
                    self.data_epoch.adopt()  # the first use of a Redis writes its data epoch marker
            self._known_queues.add(queue)

    def _args_json(self, args, tt: TaskType, quota: Quota | None) -> str:
        if not isinstance(args, dict):
            raise ValueError(f"args must be a JSON object (dict), got {type(args).__name__}")
        tt.bind(None, args)  # BadArgs now, rather than a failure on every attempt
        limit = self.config.max_args_bytes
        return self._json("args", args, min(limit, quota.max_args_bytes or limit) if quota else limit)

    def _json(self, what: str, value, limit: int | None = None) -> str:
        return _json_text(what, value, limit or self.config.max_args_bytes)


def _kept_place(reply: list) -> bool:
    """Whether a dispatch kept the task's place in line (lua/dispatch.lua: a task passed over)."""
    return len(reply) > 2 and text(reply[2]) == "1"


def _own_timeout(reply: list) -> float:
    """The dispatched task's own attempt timeout, seconds (lua/dispatch.lua's reply)."""
    return int(text(reply[3])) / 1000 if len(reply) > 3 and reply[3] else 0.0
