"""RQ's own bookkeeping around a job, the same records in fewer round trips (issue 15).

RQ 3.0's worker loop (rq/worker/base.py ``work``) makes twenty round trips a job in a
SimpleWorker (RQ 2.8, the oldest ghostless runs on, eighteen, in the same order). Some of them
say nothing RQ's view of the worker and its jobs lacks; the mixins here leave them out or send
them with others, and every record RQ keeps (``rq info``, its registries, a job's hash) reads
the same once the job is over:

- ``LeanHeartbeat``: the worker heartbeat (``last_heartbeat``, and the TTLs of the worker's hash
  and its executions set), asked for before each dequeue, after it and after each job, each as
  three plain commands. Sent in one pipeline, and a default one (RQ's TTL) that comes within
  ``BEAT_EVERY`` of the last one sent is skipped: RQ's ``last_heartbeat`` is at most that much
  older. The one RQ asks for right after a job is left to the suspension check that comes next in
  RQ's loop, which sends one in its own pipeline (RQ 2.8 and 3.0: nothing runs between the two).
- ``LeanState``: the worker's state (``idle`` / ``busy``) is not written again while the worker's
  hash holds it: RQ sets ``idle`` after each job and again before the next dequeue.
- ``LeanJobEnd``: a job's ``last_heartbeat``, which RQ writes as the job ends in a round trip of
  its own just before the pipeline that records its outcome. That pipeline saves the job's whole
  hash (the field included) for a success, and for a failure when RQ's exception handler runs;
  otherwise it now carries the field itself. Only ghostless's jobs (whose results RQ keeps for a
  while: engine/execution/rq_dispatch.py): a plain RQ job a worker also serves keeps RQ's way.

After a Redis failure (engine/execution/outage.py) the next heartbeat and the next state are sent,
and the next state again once the worker's hash is made anew (registered again): what the worker
wrote before may not be there (a restart without persistence, a failover to a replica that had
not caught up). The attempt's lease is renewed by
engine/execution/heartbeat.py, not here.
"""

from __future__ import annotations

import time

from rq.job import JobStatus
from rq.utils import now

BEAT_EVERY = 1.0  # s: a default heartbeat within this of the last one sent is skipped


class LeanHeartbeat:
    """Mixed into the worker classes before RQ's own."""

    #: monotonic time of the last default heartbeat sent (None: the next one is sent)
    _beat_at: float | None = None
    #: a job has just ended: the heartbeat RQ's loop asks for next is the suspension check's
    _job_just_ended = False

    def execute_job(self, job, queue):
        try:
            return super().execute_job(job, queue)
        finally:
            self._job_just_ended = True

    def heartbeat(self, timeout=None, pipeline=None):
        just_ended, self._job_just_ended = self._job_just_ended, False
        if pipeline is not None:  # within RQ's own pipeline (its suspension check's, ...): sent by its caller
            self._beat_at = time.monotonic() if timeout is None else None
            return super().heartbeat(timeout, pipeline)
        if timeout is None and just_ended and getattr(self, "_failing_since", None) is None:
            # Owed: whichever heartbeat comes next is sent (RQ's TTL is back). Not while Redis is
            # failing: then each heartbeat is the ride-out's look at it (engine/execution/outage.py).
            self._beat_at = None
            return None
        if timeout is None and self._beat_at is not None and time.monotonic() - self._beat_at < BEAT_EVERY:
            return None  # RQ's TTL was set a moment ago
        self._beat_at = None  # until this one is known to be sent
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(timeout, pipe)
            pipe.execute()
        if timeout is None:
            self._beat_at = time.monotonic()
        return None


class LeanState:
    """Mixed into the worker classes before RQ's own."""

    #: the state last written to the worker's hash (None: unknown, the next one is sent)
    _state_written: str | None = None

    def set_state(self, state, pipeline=None):
        if pipeline is None and state == self._state_written:
            self._state = state  # what RQ keeps in the process (get_state)
            return None
        self._state_written = None  # until this one is known to be written (or queued in RQ's pipeline)
        super().set_state(state, pipeline)
        self._state_written = state
        return None

    def register_birth(self):
        # A worker hash made anew holds RQ's birth fields, no state (the ride-out registers a
        # worker again after Redis lost its hash: engine/execution/outage.py).
        self._state_written = None
        return super().register_birth()


class LeanJobEnd:
    """Mixed into the worker classes before RQ's own."""

    _task_id: str | None = None  # set for a ghostless job (engine/execution/worker.py)
    #: the job whose end's heartbeat goes in the pipeline of its outcome
    _job_end_owed: str | None = None

    def handle_execution_ended(self, job, queue, heartbeat_ttl):
        if self._task_id is None:  # a plain RQ job (callbacks, Retry, repeats): RQ's own way
            return super().handle_execution_ended(job, queue, heartbeat_ttl)
        job.ended_at = now()
        job.last_heartbeat = now()  # written with the outcome, below
        self._job_end_owed = job.id
        return None

    def cleanup_execution(self, job, pipeline, **kwargs):  # RQ 3 adds ``execution``, RQ 2 has none
        # In every outcome's pipeline. A finished job's hash is saved whole in it (and so is a
        # failed one's by RQ's exception handler, when it runs), so the field is written for the rest.
        owed, self._job_end_owed = self._job_end_owed == job.id, None
        if owed and job.get_status(refresh=False) != JobStatus.FINISHED:
            job.heartbeat(job.last_heartbeat, 0, pipeline=pipeline)
        return super().cleanup_execution(job, pipeline=pipeline, **kwargs)


class LeanRQ(LeanHeartbeat, LeanState, LeanJobEnd):
    """The three, as the worker classes take them."""
