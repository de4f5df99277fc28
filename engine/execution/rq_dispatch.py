"""The RQ executor: each dispatch is one RQ job whose only argument is the task id, in the
queue's one RQ queue (``gl.images``). The job's claim may take the head of the queue's ready line
instead, a task of a higher priority (lua/claim.lua): RQ's order is the dispatch order, the tasks'
is the engine's. The task passed over gets a job at the front of the RQ queue.

Jobs use RQ's JSON serializer (never pickle), a job id unique per dispatch,
``unique=True``, no RQ retries (the engine owns retries) and short result TTLs.
On a Redis Cluster, RQ's names carry the queue's hash tag (engine/execution/rq_cluster.py).
"""

from __future__ import annotations

import logging
import math

import redis as redis_lib
from rq import Queue
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from ghostless.core import keys as keys_mod
from ghostless.core.dispatch import register
from ghostless.core.text import text

from .rq_cluster import ClusterJob, ClusterQueue, ListedWorker, is_cluster, rq_cluster_connection

log = logging.getLogger("ghostless.dispatch")

JOB_FUNC = "ghostless.execution.runner.run_task"
GRACE = 30.0  # RQ's job timeout is the attempt timeout plus this: the engine's deadline fires first
RESULT_TTL = 60  # RQ's own records matter for minutes at most; the task hash is the record
FAILURE_TTL = 3600


rq_queue_name = keys_mod.rq_queue_name  # (namespace, queue, tagged=False)


def job_timeout(attempt_timeout: float) -> int:
    """The RQ timeout of a job whose claim may start an attempt of ``attempt_timeout`` seconds
    (rounded up: never below it, lua/claim.lua's room)."""
    return math.ceil(attempt_timeout + GRACE)


def attempt_room(job) -> float | None:
    """The longest attempt the RQ ``job`` allows (``job_timeout`` undone; None: no job, or no limit)."""
    return job.timeout - GRACE if job is not None and job.timeout and job.timeout > GRACE else None


class RQDispatcher:
    active = True

    def __init__(self, redis, namespace: str):
        self.redis = redis
        self.namespace = namespace
        self.cluster = is_cluster(redis)
        self.rq_redis = rq_cluster_connection(redis)  # RQ's calls: its pipelines work on a Cluster
        self.wake_channel = keys_mod.rq_wake_channel(namespace)
        self.queue_class = ClusterQueue if self.cluster else Queue
        self.job_class = ClusterJob if self.cluster else Job

    def rq_queue(self, queue: str) -> Queue:
        return self.queue_class(
            rq_queue_name(self.namespace, queue, self.cluster),
            connection=self.rq_redis,
            serializer=JSONSerializer,
            job_class=self.job_class,
        )

    def job_id(self, queue: str | None, dispatch_id: str) -> str:
        """The RQ job of a dispatch: the dispatch id itself, or on a Cluster one carrying its queue."""
        if not self.cluster:
            return dispatch_id
        if queue is None:
            raise ValueError("on a Redis Cluster, an RQ job is found by its queue and dispatch id")
        return keys_mod.rq_job_id(queue, dispatch_id)

    def enqueue(self, task_id: str, queue: str, dispatch_id: str, timeout: float, at_front: bool = False) -> None:
        try:
            self.rq_queue(queue).enqueue_call(
                JOB_FUNC,
                args=[task_id],
                job_id=self.job_id(queue, dispatch_id),
                unique=True,
                timeout=job_timeout(timeout),
                at_front=at_front,
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
                description=f"ghostless task {task_id} (or its queue's next by priority)",
            )
        except DuplicateJobError:
            pass  # a resent enqueue of the same dispatch: the job is there
        if self.cluster:
            self._announce(queue)

    def _announce(self, queue: str) -> None:
        """Wake the idle workers that serve queues on several shards (rq_cluster.py). Lost, it
        only delays the job by rq_cluster.WAKE_WAIT: the job is in its list already."""
        try:
            self.redis.publish(self.wake_channel, queue)
        except redis_lib.RedisError as e:
            log.debug("could not announce a job of queue %s: %s", queue, e)

    def job_exists(self, dispatch_id: str, queue: str | None = None) -> bool:
        """Whether the job will still run. Asked only when a task stayed QUEUED for requeue_after.

        A job whose record says "queued" but that is in no RQ list was popped by a worker whose
        reply was lost (Redis died mid-BLPOP): it will never run. A "started" job whose task is
        still QUEUED this long was taken by a worker that died before its claim. Both are lost.
        """
        try:
            job = self.job_class.fetch(
                self.job_id(queue, dispatch_id), connection=self.rq_redis, serializer=JSONSerializer
            )
            status = job.get_status()
        except NoSuchJobError:
            return False
        if status == JobStatus.QUEUED:
            if keys_mod.rq_legacy_queue(job.origin):  # a per-priority list of before: served no more
                return False
            return self.redis.lpos(Queue(job.origin, connection=self.redis).key, job.id) is not None
        return status in (JobStatus.SCHEDULED, JobStatus.DEFERRED)

    def workers(self) -> list[dict]:
        """RQ workers serving this namespace's queues (from RQ's own registry; the dashboard's list)."""
        prefix = self.namespace + "."
        try:
            found = ListedWorker.all(connection=self.rq_redis)
        except Exception:  # RQ data we cannot read must not break the dashboard
            log.exception("cannot list RQ workers")
            return []
        out = []
        for w in found:
            queues = w.queue_names()
            if not any(q.startswith(prefix) for q in queues):
                continue
            out.append(
                {
                    "name": w.name,
                    "hostname": text(w.hostname),
                    "pid": w.pid,
                    "state": str(w.get_state()),
                    "queues": [self._queue_of(q) for q in queues],
                    "current_job": w.get_current_job_id(),
                    "last_heartbeat": w.last_heartbeat.timestamp() if w.last_heartbeat else None,
                    "started_at": w.birth_date.timestamp() if w.birth_date else None,
                }
            )
        return out

    def _queue_of(self, rq_queue: str) -> str:
        """``images`` for the RQ queue ``gl.images`` (or ``gl.{images}``, on a Cluster)."""
        prefix = self.namespace + "."
        if not rq_queue.startswith(prefix):
            return rq_queue
        name = rq_queue[len(prefix) :]
        return name[1:].replace("}", "", 1) if name.startswith("{") else name


register("rq", RQDispatcher)  # Engine(redis) / Engine(..., dispatcher="rq") (engine/core/dispatch.py)
