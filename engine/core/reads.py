"""The engine's reads of tasks: one or many, an owner's list, history, checkpoints, notifications
(mixed into the Engine like engine/core/lease_calls.py). Nothing here changes a task."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import listing, waiting
from .keys import parse_task_id
from .models import Event, Task
from .text import text

if TYPE_CHECKING:
    from .keys import Keys, TaskKeys
    from .scripts import Scripts


class Reads:
    """Mixed into Engine; uses its redis, keys and scripts."""

    # What Engine sets in __init__ and defines, declared here for the type checker.
    redis: Any
    keys: Keys
    scripts: Scripts

    if TYPE_CHECKING:

        def _keys(self, task_id: str) -> TaskKeys: ...

    def get(self, task_id: str, owner: str | None = None) -> Task | None:
        """The task, or None when it does not exist (or belongs to another owner than ``owner``)."""
        return self.get_many([task_id], owner)[0]

    def get_many(self, task_ids: list[str], owner: str | None = None) -> list[Task | None]:
        """Several tasks in one round trip (None for missing or foreign ones).

        The owner is checked first, inside one read-only script per queue (lua/read.lua): another
        owner's task costs what a missing one does (its args and result are never read), and
        the read works on a Redis at maxmemory.
        """
        read = self.scripts.read({t: self.keys.task(t) for t in task_ids if parse_task_id(t) is not None}, owner)
        return [Task.from_reply(read[t]) if read.get(t) else None for t in task_ids]

    def list_tasks(
        self,
        owner: str | None = None,
        status: str | None = None,
        type: str | None = None,
        queue: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ):
        """An owner's tasks (every owner's with ``owner=None``), newest first: (tasks, next cursor)."""
        return listing.list_tasks(self, owner, status, type, queue, limit, cursor)

    def history(self, task_id: str) -> list[Event]:
        """The task's transitions, stages and refused stale calls, oldest first (capped)."""
        if parse_task_id(task_id) is None:
            return []
        return [Event.from_json(e) for e in self.redis.lrange(self.keys.task(task_id).history, 0, -1)]

    def checkpoints(self, task_id: str) -> dict[str, Any]:
        """Values saved by ctx.checkpoint in any attempt of the task."""
        if parse_task_id(task_id) is None:
            return {}
        raw = self.redis.hgetall(self.keys.task(task_id).checkpoints)
        return {text(k): json.loads(v) for k, v in raw.items()}

    def notifications(self, task_id: str) -> list[Task]:
        """The delivery tasks made for a task's notifications, oldest first (their history is the
        delivery history)."""
        ids = [text(i) for i in self.redis.lrange(self._keys(task_id).notifications, 0, -1)]
        return [t for t in self.get_many(ids) if t is not None]

    def wait(self, task_id: str, timeout: float | None = None, owner: str | None = None) -> Task:
        """The task once it has ended (any terminal state), waiting on its queue's event stream.

        ``timeout`` in seconds (None: until it ends). Raises WaitTimeout (a TimeoutError: the task
        goes on running), TaskNotFound (also another owner's task with ``owner``)."""
        return waiting.wait(self, task_id, timeout, owner)

    def result(self, task_id: str, timeout: float | None = None, owner: str | None = None) -> Any:
        """The task's result once it has succeeded. Raises TaskFailed (``.status`` FAILED, TIMEOUT
        or CANCELLED, ``.reason``, ``.error_kind``, ``.task``) when it ended otherwise, and what
        ``wait`` raises."""
        return waiting.result(self, task_id, timeout, owner)
