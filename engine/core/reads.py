"""The engine's reads of tasks: one or many, an owner's list, history, checkpoints, notifications
(mixed into the Engine like engine/core/claim_calls.py and lease_calls.py). Nothing here changes a task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import listing, task_calls, waiting
from .models import Task
from .steps import sync_call
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

    # Written once as steps (engine/core/steps.py), which the AsyncEngine runs too.
    get = sync_call(task_calls.get)
    get_many = sync_call(task_calls.get_many)
    history = sync_call(task_calls.history)
    wait = sync_call(waiting.wait)
    result = sync_call(waiting.result)
    list_tasks = sync_call(listing.list_tasks)
    checkpoints = sync_call(task_calls.checkpoints)

    def notifications(self, task_id: str) -> list[Task]:
        """The delivery tasks made for a task's notifications, oldest first (their history is the
        delivery history)."""
        ids = [text(i) for i in self.redis.lrange(self._keys(task_id).notifications, 0, -1)]
        return [t for t in self.get_many(ids) if t is not None]
