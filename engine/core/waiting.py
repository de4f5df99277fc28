"""Waiting for a task to end: ``Engine.wait`` and ``Engine.result`` (RQ's
``job.latest_result(timeout=)``, Celery's ``AsyncResult.get(timeout=)``, BullMQ's
``waitUntilFinished``), and the AsyncEngine's, awaited: written once as steps
(engine/core/steps.py), so the AsyncEngine blocks in ``XREAD`` on its async client.

Driven by the task's queue event stream, not by polling the task: the waiter notes the stream's
last entry, reads the task (already ended: returned at once), then blocks in ``XREAD`` on the
stream from that entry until the task's terminal transition arrives (the task is read again and
returned) or the timeout passes (``WaitTimeout``). An event written between the first read and the
first ``XREAD`` is not missed: the read starts from the entry noted before the task was read. Each
blocking read lasts at most ``MAX_BLOCK`` seconds (and half the client's socket timeout), after
which the task is read again, so an event trimmed from a full stream, or a stream lost with its
Redis, delays the answer by one block at most. A waiter reads its whole queue's events: cheap for
a few waiters, but thousands of waiters on one busy queue each read every event (the web's task
pages share one reader per process instead, web/broker.py; so do the AsyncEngine's waiters,
engine/core/aio_watch.py: the ``Events`` step is where the two engines differ).
"""

from __future__ import annotations

import time
from typing import Any

from .errors import TaskFailed, TaskNotFound, WaitTimeout
from .models import Task
from .states import State
from .steps import CLIENT, Call, Command, Events
from .streams import is_terminal, stream_event
from .task_calls import get
from .text import text

MAX_BLOCK = 2.0  # seconds one XREAD blocks at most
BATCH = 500  # events one XREAD returns at most


def wait(engine, task_id: str, timeout: float | None = None, owner: str | None = None) -> Call[Task]:
    """The task once it has ended (any terminal state), waiting on its queue's event stream.

    ``timeout`` in seconds (None: until it ends). ``owner``: only that owner's task (another's is
    not found). Raises WaitTimeout (a TimeoutError: the task goes on running), TaskNotFound,
    ValueError for a negative timeout.
    """
    if timeout is not None and (isinstance(timeout, bool) or not timeout >= 0):
        raise ValueError("timeout must be a number of seconds >= 0, or None")
    deadline = None if timeout is None else time.monotonic() + timeout
    task = yield from get(engine, task_id, owner)
    if task is None:
        raise TaskNotFound(task_id)
    key = engine.keys.queue_key(task.queue, "events")
    rows = yield Command("xrevrange", (key, "+", "-"), {"count": 1})
    position = text(rows[0][0]) if rows else "0-0"  # the stream's last entry ("0-0": empty, missing)
    task = yield from get(engine, task_id, owner)  # read after noting the position: no event falls between
    block = min(MAX_BLOCK, _socket_timeout((yield CLIENT)) / 2)
    read_at = time.monotonic()
    while True:
        if task is None:
            raise TaskNotFound(task_id)  # purged (or its Redis lost it) while we waited
        if task.terminal:
            return task
        now = time.monotonic()
        left = None if deadline is None else deadline - now
        if left is not None and left <= 0:
            raise WaitTimeout(task_id, timeout or 0.0, task)
        wait_ms = max(1, int(min(block, left or block) * 1000))
        position, ended = yield Events(key, task.queue, task_id, position, wait_ms)
        if ended or time.monotonic() - read_at >= block:  # its end, or a look now and then
            task = yield from get(engine, task_id, owner)
            read_at = time.monotonic()


def result(engine, task_id: str, timeout: float | None = None, owner: str | None = None) -> Call[Any]:
    """The task's result once it has succeeded. Raises TaskFailed (``.status`` FAILED, TIMEOUT
    or CANCELLED, ``.reason``, ``.error_kind``, ``.task``) when it ended otherwise, and what
    ``wait`` raises."""
    task = yield from wait(engine, task_id, timeout, owner)
    if task.status != State.SUCCESS:
        raise TaskFailed(task)
    return task.result


def next_events(client, step: Events) -> tuple[str, bool]:
    """An ``Events`` step on redis-py: one XREAD of the waiter's own."""
    reply = client.xread({step.key: step.position}, count=BATCH, block=step.block_ms)
    return scan(reply, step.queue, step.task_id, step.position)


def scan(reply, queue: str, task_id: str, position: str) -> tuple[str, bool]:
    """The new position after an XREAD's events, and whether the task's terminal transition was
    among them."""
    ended = False
    for _key, rows in reply or []:
        for sid, fields in rows:
            position = text(sid)
            event = stream_event(queue, sid, fields)
            ended = ended or (event["task_id"] == task_id and is_terminal(event))
    return position, ended


def _socket_timeout(client) -> float:
    """The client's read timeout in seconds (10 when it has none or cannot tell)."""
    pool = getattr(client, "connection_pool", None)
    value = getattr(pool, "connection_kwargs", {}).get("socket_timeout") if pool is not None else None
    return float(value) if value else 10.0
