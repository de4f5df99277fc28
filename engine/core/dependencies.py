"""Tasks that wait on others (``submit(..., depends_on=[ids])``).

A child waits in PENDING, in its queue's ``waiting`` set, until every parent is
SUCCESS; a parent that ends otherwise cancels it (``dependency_failed:<id>``).
When a parent ends, the script that ended it marks its waiting children due and
says so in its reply; the engine then resolves them at once (lua/resolve.lua),
and dispatches the ready ones. The waiting set is also a deadline set: the
sweeper looks at a waiting task's parents at least once a minute, so a crash
between the two steps delays a child but never forgets it.

Parents must be in the child's queue: every key a script touches shares the
queue's hash tag (one Redis Cluster slot).
"""

from __future__ import annotations

from .errors import Code, TaskNotFound
from .keys import TaskKeys, parse_task_id
from .text import text

MAX_PARENTS = 32


def parents(engine, queue: str, depends_on) -> tuple[list[str], list[TaskKeys]]:
    """Validated parent ids, and their keys in the same order (as submit takes them)."""
    if depends_on is None:
        return [], []
    if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, (list, tuple)):
        raise ValueError("depends_on must be a list of task ids")
    ids = list(dict.fromkeys(depends_on))
    if len(ids) > MAX_PARENTS:
        raise ValueError(f"depends_on lists more than {MAX_PARENTS} tasks")
    keys: list[TaskKeys] = []
    for pid in ids:
        pq = parse_task_id(pid)
        if pq is None:
            raise ValueError(f"depends_on: {pid!r} is not a task id")
        if pq != queue:
            raise ValueError(
                f"depends_on: task {pid} is in queue {pq!r}; parents must be in the child's queue ({queue!r})"
            )
        keys.append(engine.keys.task(pid))
    return ids, keys


def resolve(engine, task_id: str) -> str | None:
    """Look at a waiting task's parents now: 'ready' (dispatched), 'delayed' (ready, dispatched by the
    sweeper once the delay it was submitted with has passed), 'cancelled', or None (waits on)."""
    keys = engine.keys.task(task_id)
    parents = engine.redis.hget(keys.task, "parents")
    parents = text(parents)
    ids = [p for p in parents.split(",") if p]
    reply = engine.scripts.resolve(keys, task_id, ids, [engine.keys.task(pid) for pid in ids])
    if reply[0] != Code.OK:
        return None
    if reply[1] == "ready" and engine.dispatcher.active:
        try:
            engine.dispatch(task_id)
        except TaskNotFound:
            pass
    return reply[1]


def resolve_due(engine, waiting_key: str, batch: int = 100) -> int:
    """Resolve the tasks of one waiting set that are due now (server time). Returns how many moved."""
    moved = 0
    while True:
        (ids,), _ = engine.scripts.due([waiting_key], batch)
        done = [resolve(engine, tid) for tid in ids]
        moved += sum(1 for d in done if d)
        if len(ids) < batch or not any(done):
            return moved
