"""The owners' and admins' verbs on tasks that exist: cancel, edit, retry, and the operations
reclaim, retry_failed, drain. Each change is one script call, owner-checked inside it (mixed into
the Engine like engine/core/lease_calls.py).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ghostless.core import dependencies as deps

from . import listing
from .errors import Code, IllegalTransition, TaskNotFound, refusing_full
from .keys import new_task_id, parse_task_id
from .models import Task
from .quota import Quota
from .states import State
from .text import text_or_none
from .validate import text as _text

if TYPE_CHECKING:
    from .dispatch import Dispatcher
    from .keys import Keys, TaskKeys
    from .registry import Registry, TaskType
    from .scripts import Scripts


class Management:
    """Mixed into Engine; uses its redis, keys, registry, scripts, dispatcher and its helpers
    (``_keys``, ``_require``, ``_args_json``, ``dispatch``, ``get``)."""

    # What Engine sets in __init__ and defines, declared here for the type checker.
    redis: Any
    keys: Keys
    registry: Registry
    scripts: Scripts
    dispatcher: Dispatcher

    if TYPE_CHECKING:

        def _keys(self, task_id: str) -> TaskKeys: ...
        def _require(self, task_id: str) -> Task: ...
        def _args_json(self, args: Any, tt: TaskType, quota: Quota | None) -> str: ...
        def dispatch(self, task_id: str) -> str | None: ...
        def get(self, task_id: str, owner: str | None = None) -> Task | None: ...
        def queues(self) -> list[str]: ...

    def cancel(self, task_id: str, *, by: str, admin: bool = False, reason: str = "") -> None:
        """Cancel a task that has not ended. Raises TaskNotFound (also for another owner's task),
        IllegalTransition (already ended). Cancelling a cancelled task is a no-op."""
        by = _text("by", by)
        self.scripts.cancel(self._keys(task_id), task_id, by, admin, _text("reason", reason or f"cancelled by {by}"))

    def edit(
        self,
        task_id: str,
        args: dict,
        *,
        by: str,
        admin: bool = False,
        quota: Quota | None = None,
        internal: bool = False,
    ) -> Task:
        """Atomically cancel a task that has not ended and submit its replacement with ``args``.

        ``quota`` (the task owner's, as for submit) counts the edit against its rate and the new
        args, in place of the old ones, against its unfinished bytes. Returns the new task.
        Raises TaskNotFound, IllegalTransition, UnknownTaskType (also an internal type, unless
        ``internal``), BadArgs, ValueError, QuotaExceeded.
        """
        by = _text("by", by)
        old_keys = self._keys(task_id)
        queue = parse_task_id(task_id)
        assert queue is not None  # _keys refused a malformed id
        new_id = new_task_id(queue)
        owner, type_name = (text_or_none(v) for v in self.redis.hmget(old_keys.task, "owner", "type"))
        if owner is None or not (admin or owner == by):  # the script checks again, atomically
            raise TaskNotFound(task_id)
        args_json = self._args_json(args, self.registry.submittable(type_name, internal), quota)
        owner_index = self.keys.owner_index(queue, owner)
        reply = self.scripts.edit(
            old_keys,
            task_id,
            self.keys.task(new_id),
            owner_index,
            by,
            admin,
            new_id,
            args_json,
            quota.spec() if quota else "",
            self.keys.submit_rate(queue, owner) if quota else None,
        )
        new_id = reply[1]
        if reply[0] == Code.OK and len(reply) > 3 and reply[3] == "resolve":
            deps.resolve(self, new_id)  # it waits on the old task's parents: register with them
        elif reply[0] == Code.OK and self.dispatcher.active and reply[3] != "delayed":
            self.dispatch(new_id)  # a delayed one is dispatched by the sweeper when its delay has passed
        return self._require(new_id)

    def retry(self, task_id: str, *, by: str, admin: bool = False) -> None:
        """Reopen a FAILED or TIMEOUT task (attempts start again); audited in its history."""
        by = _text("by", by)
        reply = self.scripts.retry(self._keys(task_id), task_id, by, admin, uuid.uuid4().hex)
        if self.dispatcher.active and reply[0] == Code.OK:
            self.dispatch(task_id)

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
            page, cursor = listing.list_tasks(
                self, None, status=State.FAILED.value, type=tt.name, queue=queue or tt.queue, limit=500, cursor=cursor
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
