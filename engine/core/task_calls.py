"""Client calls on tasks that exist: get, get_many, history, cancel, edit, retry. Each is written
once as steps (engine/core/steps.py) that the Engine and the AsyncEngine both run; ``engine`` is
the sync Engine whose keys, registry and dispatcher they use."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ghostless.core import dependencies as deps

from . import plans
from .errors import Code, TaskNotFound
from .keys import BODY_HISTORY, new_task_id, parse_task_id
from .models import Event, Task, history_entries, resolved
from .quota import Quota
from .steps import Blocking, Call, Command, ReadTasks
from .text import text, text_or_none
from .validate import text as _text


def get(engine, task_id: str, owner: str | None = None) -> Call[Task | None]:
    """The task, or None when it does not exist (or belongs to another owner than ``owner``)."""
    return (yield from get_many(engine, [task_id], owner))[0]


def get_many(engine, task_ids: list[str], owner: str | None = None) -> Call[list[Task | None]]:
    """Several tasks in one round trip (None for missing or foreign ones).

    The owner is checked first, inside one read-only script per queue (lua/read.lua): another
    owner's task costs what a missing one does (its args and result are never read), and
    the read works on a Redis at maxmemory.
    """
    read = yield ReadTasks({t: engine.keys.task(t) for t in task_ids if parse_task_id(t) is not None}, owner)
    return [Task.from_reply(read[t], t) if read.get(t) else None for t in task_ids]


def require(engine, task_id: str) -> Call[Task]:
    task = yield from get(engine, task_id)
    if task is None:
        raise TaskNotFound(task_id)
    return task


def history(engine, task_id: str) -> Call[list[Event]]:
    """The task's transitions, stages and refused stale calls, oldest first (capped)."""
    if parse_task_id(task_id) is None:
        return []
    keys = engine.keys.task(task_id)
    rows = yield Command("lrange", (keys.body, BODY_HISTORY, -1))
    if not rows:  # a task from before the body (keys.py TaskKeys), or none
        rows = yield Command("lrange", (keys.history, 0, -1))
    entries = history_entries(rows)
    if not resolved(entries):  # a long history, trimmed past its submit or claim entry
        attempt, worker, created = yield Command("hmget", (keys.task, "attempt", "worker", "created_at"))
        entries = history_entries(rows, int(attempt or 0), text(worker or ""), int(created or 0) or None)
    return [Event.from_entry(d) for d in entries]


def checkpoints(engine, task_id: str) -> Call[dict[str, Any]]:
    """Values saved by ctx.checkpoint in any attempt of the task."""
    if parse_task_id(task_id) is None:
        return {}
    raw = yield Command("hgetall", (engine.keys.task(task_id).checkpoints,))
    return {text(k): json.loads(v) for k, v in raw.items()}


def cancel(engine, task_id: str, *, by: str, admin: bool = False, reason: str = "") -> Call[None]:
    """Cancel a task that has not ended. Raises TaskNotFound (also for another owner's task),
    IllegalTransition (already ended). Cancelling a cancelled task is a no-op."""
    by = _text("by", by)
    keys = engine._keys(task_id)
    yield plans.cancel(keys, task_id, by, admin, _text("reason", reason or f"cancelled by {by}"))


def edit(
    engine,
    task_id: str,
    args: dict,
    *,
    by: str,
    admin: bool = False,
    quota: Quota | None = None,
    internal: bool = False,
) -> Call[Task]:
    """Atomically cancel a task that has not ended and submit its replacement with ``args``.

    ``quota`` (the task owner's, as for submit) counts the edit against its rate and the new
    args, in place of the old ones, against its unfinished bytes. Returns the new task.
    Raises TaskNotFound, IllegalTransition, UnknownTaskType (also an internal type, unless
    ``internal``), BadArgs, ValueError, QuotaExceeded.
    """
    by = _text("by", by)
    old_keys = engine._keys(task_id)
    queue = parse_task_id(task_id)
    assert queue is not None  # _keys refused a malformed id
    new_id = new_task_id(queue)
    row = yield Command("hmget", (old_keys.task, "owner", "type"))
    owner, type_name = (text_or_none(v) for v in row)
    if owner is None or not (admin or owner == by):  # the script checks again, atomically
        raise TaskNotFound(task_id)
    args_json = engine._args_json(args, engine.registry.submittable(type_name, internal), quota)
    reply = yield plans.edit(
        old_keys,
        task_id,
        engine.keys.task(new_id),
        engine.keys.owner_index_keys(queue, owner, new_id),
        by,
        admin,
        new_id,
        args_json,
        quota.spec() if quota else "",
        engine.keys.submit_rate(queue, owner) if quota else None,
    )
    new_id = reply[1]
    if reply[0] == Code.OK and len(reply) > 3 and reply[3] == "resolve":
        yield Blocking(deps.resolve, (engine, new_id))  # it waits on the old task's parents: register with them
    elif reply[0] == Code.OK and engine.dispatcher.active and reply[3] != "delayed":
        yield Blocking(engine.dispatch, (new_id,))  # a delayed one is dispatched by the sweeper when due
    return (yield from require(engine, new_id))


def retry(engine, task_id: str, *, by: str, admin: bool = False) -> Call[None]:
    """Reopen a FAILED or TIMEOUT task (attempts start again); audited in its history."""
    by = _text("by", by)
    reply = yield plans.retry(engine._keys(task_id), task_id, by, admin, uuid.uuid4().hex)
    if engine.dispatcher.active and reply[0] == Code.OK:
        yield Blocking(engine.dispatch, (task_id,))
