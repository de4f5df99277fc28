"""The owners' and admins' verbs on tasks that exist: cancel, edit, retry, and the operations
reclaim, retry_failed, drain. Each change is one script call, owner-checked inside it (mixed into
the Engine like engine/core/claim_calls.py and lease_calls.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import task_calls
from .engine_parts import EngineParts
from .errors import Code, IllegalTransition, TaskNotFound, refusing_full
from .models import Task
from .states import State
from .steps import sync_call
from .validate import text as _text

if TYPE_CHECKING:
    pass


class Management(EngineParts):
    """Mixed into Engine; uses its redis, keys, registry, scripts, dispatcher and its helpers
    (``_keys``, ``_require``, ``dispatch``, ``get``, ``queues``, ``list_tasks``). Its cancel, edit
    and retry are written in engine/core/task_calls.py."""

    if TYPE_CHECKING:

        def _require(self, task_id: str) -> Task: ...
        def get(self, task_id: str, owner: str | None = None) -> Task | None: ...
        def queues(self) -> list[str]: ...
        def list_tasks(self, *args: Any, **kwargs: Any) -> tuple[list[Task], str | None]: ...

    # Written once as steps (engine/core/steps.py), which the AsyncEngine runs too.
    cancel = sync_call(task_calls.cancel)
    edit = sync_call(task_calls.edit)
    retry = sync_call(task_calls.retry)

    def reclaim(self, task_id: str, *, by: str) -> State:
        """Admin: take a PROCESSING task from its worker now (a stuck one), as if its lease had
        lapsed: PROCESSING -> TIMEOUT -> RETRY_WAITING, retried at once (or TIMEOUT when no attempt
        remains). Returns the state it is in then. Raises IllegalTransition when not PROCESSING."""
        reply = self.scripts.expire(self._keys(task_id), task_id, _text("by", by))
        assert reply is not None  # not on a pipeline
        if reply[0] == Code.NOT_DUE:
            raise IllegalTransition(task_id, self._require(task_id).status.value, "reclaim")
        if reply[1] == State.PENDING.value and self.dispatcher.active:  # promoted in the same call
            self.dispatch(task_id)
        return self._require(task_id).status

    def retry_failed(self, type: str, *, by: str, queue: str | None = None, on_total=None, on_each=None) -> int:
        """Admin: manual ``retry`` of every FAILED task of a type. Returns how many were reopened.

        The FAILED tasks are listed first, then retried one by one: ``on_total(n)`` is called with
        their number and ``on_each(task_id)`` after each retry (for a progress display).
        """
        tt = self.registry.get(type)
        ids, cursor = [], None
        while True:
            page, cursor = self.list_tasks(
                None, status=State.FAILED.value, type=tt.name, queue=queue or tt.queue, limit=500, cursor=cursor
            )
            ids += [task.id for task in page]
            if cursor is None:
                break
        if on_total is not None:
            on_total(len(ids))
        count = 0
        for task_id in ids:
            try:
                self.retry(task_id, by=by, admin=True)
                count += 1
            except (IllegalTransition, TaskNotFound):
                pass  # retried or purged meanwhile
            if on_each is not None:
                on_each(task_id)
        return count

    def drain(self, queue: str, draining: bool = True) -> None:
        """Admin: stop (or, with False, resume) handing the queue's tasks to workers. Tasks already
        queued or running finish; new and returning ones wait in PENDING until resumed."""
        key = self.keys.queue_key(queue, "control")
        with refusing_full(f"drain of queue {queue}"):
            self.redis.hset(key, "draining", 1) if draining else self.redis.hdel(key, "draining")

    def draining(self) -> list[str]:
        """Queues that are draining."""
        pipe = self.redis.pipeline(transaction=False)
        queues = self.queues()
        for q in queues:
            pipe.hget(self.keys.queue_key(q, "control"), "draining")
        return [q for q, flag in zip(queues, pipe.execute()) if flag]
