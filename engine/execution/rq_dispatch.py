"""The RQ executor: each dispatch is one RQ job whose only argument is the task id.

Jobs use RQ's JSON serializer (never pickle), a job id unique per dispatch,
``unique=True``, no RQ retries (the engine owns retries) and short result TTLs.
"""

from __future__ import annotations

import logging

from rq import Queue, Worker
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from ghostless.core.dispatch import register
from ghostless.core.priority import LEVELS
from ghostless.core.text import text

log = logging.getLogger("ghostless.dispatch")

JOB_FUNC = "ghostless.execution.runner.run_task"
GRACE = 30.0  # RQ's job timeout is the attempt timeout plus this: the engine's deadline fires first
RESULT_TTL = 60  # RQ's own records matter for minutes at most; the task hash is the record
FAILURE_TTL = 3600


def rq_queue_name(namespace: str, queue: str, priority: int = 0) -> str:
    """The RQ list of one priority of a queue: ``gl.images`` (0), ``gl.images@+5``, ``gl.images@-3``."""
    return f"{namespace}.{queue}" + (f"@{priority:+d}" if priority else "")


def rq_queue_names(namespace: str, queue: str) -> list[str]:
    """Every priority's RQ list of a queue, highest first: the order a worker pops them in."""
    return [rq_queue_name(namespace, queue, p) for p in LEVELS]


class RQDispatcher:
    active = True

    def __init__(self, redis, namespace: str):
        self.redis = redis
        self.namespace = namespace

    def rq_queue(self, queue: str, priority: int = 0) -> Queue:
        return Queue(rq_queue_name(self.namespace, queue, priority), connection=self.redis, serializer=JSONSerializer)

    def enqueue(
        self, task_id: str, queue: str, dispatch_id: str, priority: int, timeout: float, at_front: bool = False
    ) -> None:
        try:
            self.rq_queue(queue, priority).enqueue_call(
                JOB_FUNC,
                args=[task_id],
                job_id=dispatch_id,
                unique=True,
                timeout=int(timeout + GRACE),
                at_front=at_front,
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
                description=f"ghostless task {task_id}",
            )
        except DuplicateJobError:
            pass  # a resent enqueue of the same dispatch: the job is there

    def job_exists(self, dispatch_id: str) -> bool:
        """Whether the job will still run. Asked only when a task stayed QUEUED for requeue_after.

        A job whose record says "queued" but that is in no RQ list was popped by a worker whose
        reply was lost (Redis died mid-BLPOP): it will never run. A "started" job whose task is
        still QUEUED this long was taken by a worker that died before its claim. Both are lost.
        """
        try:
            job = Job.fetch(dispatch_id, connection=self.redis, serializer=JSONSerializer)
            status = job.get_status()
        except NoSuchJobError:
            return False
        if status == JobStatus.QUEUED:
            return self.redis.lpos(Queue(job.origin, connection=self.redis).key, dispatch_id) is not None
        return status in (JobStatus.SCHEDULED, JobStatus.DEFERRED)

    def workers(self) -> list[dict]:
        """RQ workers serving this namespace's queues (from RQ's own registry; the dashboard's list)."""
        prefix = self.namespace + "."
        try:
            found = Worker.all(connection=self.redis)
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
                    "queues": [q[len(prefix) :] if q.startswith(prefix) else q for q in queues],
                    "current_job": w.get_current_job_id(),
                    "last_heartbeat": w.last_heartbeat.timestamp() if w.last_heartbeat else None,
                    "started_at": w.birth_date.timestamp() if w.birth_date else None,
                }
            )
        return out


register("rq", RQDispatcher)  # Engine(redis) / Engine(..., dispatcher="rq") (engine/core/dispatch.py)
