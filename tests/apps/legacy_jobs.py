"""Plain RQ job functions, as a team's existing RQ fleet has them (tests/worker/test_plain_rq.py):
enqueued with ``rq.Queue(...).enqueue`` and RQ's own serializer, run by a ghostless worker that
also serves the plain RQ queue (``--rq-queue``)."""

from __future__ import annotations

from rq import get_current_job


def add(a, b):
    return a + b


def with_progress(steps):
    job = get_current_job()
    for i in range(steps):
        job.meta["progress"] = (i + 1) / steps
        job.save_meta()
    return {"done": steps}


def broken():
    raise RuntimeError("legacy job failed on purpose")


def flaky(counter_key):
    """Fails on its first run, succeeds on the second (RQ's Retry runs it again)."""
    job = get_current_job()
    runs = job.connection.incr(counter_key)
    if runs == 1:
        raise RuntimeError("first run fails")
    return runs
