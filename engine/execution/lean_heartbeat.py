"""RQ's worker heartbeat, sent once where RQ sends it three times a job, in one round trip.

RQ 3.0's worker loop refreshes its worker hash (``last_heartbeat``, and the TTLs of the hash and
its executions set) before each dequeue, after it and after each job: three plain calls of three
commands each, nine round trips of a job's twenty. The TTL they set is RQ's ``worker_ttl`` + 60 s
(480 s), so for fast jobs two of the three say nothing new. ``LeanHeartbeat`` sends the three
commands in one pipeline, and skips a default heartbeat (RQ's TTL) that comes within
``BEAT_EVERY`` of the last one sent: RQ's view of the worker (its hash, its TTL, ``rq info``) is
the same, its ``last_heartbeat`` at most that much older.

A heartbeat with its own TTL (RQ's while a work-horse runs, or before a job) is always sent, and
after one the next default heartbeat is sent too, so RQ's TTL is back. A heartbeat in one of RQ's
own pipelines (its suspension check sends one before each dequeue) is left as it is, and counts as
sent. After a Redis failure (engine/execution/outage.py) the next one is sent. The attempt's lease
is renewed by engine/execution/heartbeat.py, not here.
"""

from __future__ import annotations

import time

BEAT_EVERY = 1.0  # s: a default heartbeat within this of the last one sent is skipped


class LeanHeartbeat:
    """Mixed into the worker classes before RQ's own."""

    #: monotonic time of the last default heartbeat sent (None: the next one is sent)
    _beat_at: float | None = None

    def heartbeat(self, timeout=None, pipeline=None):
        if pipeline is not None:  # within RQ's own pipeline (its suspension check's, ...): sent by its caller
            self._beat_at = time.monotonic() if timeout is None else None
            return super().heartbeat(timeout, pipeline)
        if timeout is None and self._beat_at is not None and time.monotonic() - self._beat_at < BEAT_EVERY:
            return None  # RQ's TTL was set a moment ago
        self._beat_at = None  # until this one is known to be sent
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(timeout, pipe)
            pipe.execute()
        if timeout is None:
            self._beat_at = time.monotonic()
        return None
