"""The dispatch hook: how the engine hands a PENDING task to an executor.

The RQ executor (engine/execution/rq_dispatch.py) implements this protocol and registers itself
under the name ``"rq"`` (``register``): the core names no executor, the execution layer supplies it.
Without one, tasks wait in PENDING in the ``dispatch`` deadline set, and a
worker may still claim them directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Dispatcher(Protocol):
    #: False for NullDispatcher: the engine then leaves tasks in PENDING.
    active: bool

    def enqueue(self, task_id: str, queue: str, dispatch_id: str, timeout: float, at_front: bool = False) -> None:
        """Create the executor job ``dispatch_id`` whose one argument is ``task_id``, at the back of
        the queue's one line of jobs (``at_front``: at its front, for a task a claim passed over,
        which is next). Its claim (``Engine.claim`` with the dispatch id) may take the head of the
        queue's ready line instead (priority order): the executor keeps no order of its own.

        May be called twice for one task (at-least-once); the claim keeps each
        attempt to one execution.
        """

    def job_exists(self, dispatch_id: str, queue: str) -> bool:
        """Whether the job of a QUEUED task of ``queue`` is still waiting or running (sweeper check)."""

    def workers(self) -> list[dict]:
        """The executor's workers serving this namespace (the dashboard's list); [] when it has none."""


class NullDispatcher:
    active = False

    def enqueue(self, task_id, queue, dispatch_id, timeout, at_front=False) -> None:  # pragma: no cover
        raise RuntimeError("NullDispatcher never enqueues")

    def job_exists(self, dispatch_id, queue=None) -> bool:  # pragma: no cover
        return False

    def workers(self) -> list[dict]:
        return []


#: name -> factory ``(redis, namespace) -> Dispatcher``; filled by the execution layer at import
#: (``import ghostless`` imports it), so ``Engine(redis)`` dispatches to RQ without the core naming it.
FACTORIES: dict[str, Callable[..., Dispatcher]] = {}


def register(name: str, factory: Callable[..., Dispatcher]) -> None:
    FACTORIES[name] = factory


def make(name: str, redis, namespace: str) -> Dispatcher:
    try:
        factory = FACTORIES[name]
    except KeyError:
        raise ValueError(f"no dispatcher named {name!r} (registered: {sorted(FACTORIES)})") from None
    return factory(redis, namespace)
