"""Read-only queries the web app needs beyond the Engine API: snapshots with their stream
position, stuck tasks, throughput, workers, the user of a token digest.

Nothing here changes a task: every write goes through the scripts (engine/core/engine.py).
"""

from __future__ import annotations

import logging
import re

from ghostless.core.clock import server_ms
from ghostless.core.keys import parse_task_id
from ghostless.core.models import Event, Task, history_entries
from ghostless.core.states import State

# The stream readers and server_ms live in the core (``ghostless tail`` uses them too); web/sse.py
# reaches them through this module.
from ghostless.core.streams import (  # noqa: F401
    MAX_SEQ,
    TERMINAL_VALUES,
    is_terminal,
    parse_stream_id,
    read_stream,
    stream_may_be_trimmed,
)
from ghostless.core.text import text

log = logging.getLogger("ghostless.web")


def snapshot(engine, task_id: str, owner: str | None = None):
    """(task or None, history, stream id of the queue's newest event) read atomically, so that
    every event after that id is newer than the snapshot. None for another owner's task than
    ``owner`` (None: anyone's), found without reading its args, result or history; read-only, so
    it works on a Redis at maxmemory (engine/core/scripts.py ``read``)."""
    if parse_task_id(task_id) is None:
        return None, [], "0-0"
    entry = engine.scripts.read({task_id: engine.keys.task(task_id)}, owner, full=True)[task_id]
    if not entry:
        return None, [], "0-0"
    task = Task.from_reply(entry, task_id)
    created_ms = round(task.created_at * 1000) if task.created_at else None
    entries = history_entries(entry[4], task.attempt, task.worker, created_ms)
    return task, [Event.from_entry(d) for d in entries], entry[5]


# -- users ----------------------------------------------------------------------------------------
def user_for_digest(engine, digest: object):
    """The user owning the token with this SHA-256 digest (None once the token is revoked)."""
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        return None
    return engine.users.for_digest(digest)


def stuck_tasks(engine, queued_after: float, owner: str | None = None, limit: int = 100) -> list[dict]:
    """PROCESSING tasks past their lease deadline (the sweeper has not reclaimed them) and
    PENDING/QUEUED tasks waiting longer than ``queued_after`` seconds. Reads only what is due."""
    now = server_ms(engine.redis)
    requeue_ms = int(engine.config.requeue_after * 1000)
    out = []
    for queue in engine.queues():
        # A QUEUED task's dispatch deadline is dispatched_at + requeue_after: the oldest come first.
        for key, until in (
            (engine.keys.queue_key(queue, "leases"), now),
            (engine.keys.queue_key(queue, "dispatch"), now - queued_after * 1000 + requeue_ms),
        ):
            out += _stuck_in(engine, key, until, now, queued_after, owner, limit)
    out.sort(key=lambda s: -s["for_seconds"])
    return out[:limit]


def _stuck_in(
    engine, key: str, until: float, now: int, queued_after: float, owner: str | None, limit: int
) -> list[dict]:
    """Up to ``limit`` of ``owner``'s stuck tasks among one deadline set's due entries, read a
    batch at a time: other owners' tasks first in line must not hide the caller's."""
    out, offset = [], 0
    while len(out) < limit:
        ids = [text(i) for i in engine.redis.zrangebyscore(key, "-inf", until, offset, limit)]
        for task in engine.get_many(ids, owner=owner):
            if task is None:
                continue
            if task.status == State.PROCESSING and task.lease_deadline and task.lease_deadline * 1000 < now:
                out.append(_stuck(task, "lease_expired", now / 1000 - task.lease_deadline))
            elif (
                task.status in (State.PENDING, State.QUEUED)
                and task.updated_at
                and now / 1000 - task.updated_at >= queued_after
            ):
                out.append(_stuck(task, f"{task.status.value.lower()}_too_long", now / 1000 - task.updated_at))
        if len(ids) < limit:
            return out
        offset += limit
    return out


def _stuck(task: Task, why: str, seconds: float) -> dict:
    return {
        "task_id": task.id,
        "queue": task.queue,
        "type": task.type,
        "owner": task.owner,
        "status": task.status.value,
        "stage": task.stage,
        "why": why,
        "for_seconds": round(seconds, 3),
    }


def throughput(engine, minutes: int = 5) -> dict:
    """Tasks that reached each terminal state per minute, over the last ``minutes`` whole minutes
    and the current one, read from the queue streams (capped, so a busy queue may show less)."""
    now = server_ms(engine.redis)
    first = (now // 60000 - minutes) * 60000
    buckets = [first + i * 60000 for i in range(minutes + 1)]
    out = {}
    for queue in engine.queues():
        rows = {b: dict.fromkeys(sorted(TERMINAL_VALUES), 0) for b in buckets}
        for ev in read_stream(engine, queue, str(first), f"{now}-{MAX_SEQ}"):  # not past `now`: no bucket
            if is_terminal(ev):
                rows[int(ev["at"] * 1000) // 60000 * 60000][ev["to"]] += 1
        out[queue] = [{"minute": b / 1000, **rows[b]} for b in buckets]
    return out


def workers(engine) -> list[dict]:
    """The executor's workers serving this namespace (RQ's registry, read by the execution layer)."""
    return engine.dispatcher.workers()
