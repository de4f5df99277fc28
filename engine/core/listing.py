"""Listing tasks newest first, per owner (or all, for admins), with filters and a cursor.

Each queue keeps an index per owner (and one of all tasks) scored by creation time, in pages
(engine/core/index.py); a listing merges the queues' indexes newest first. The cursor is
the position of the last task returned: ``<created ms>.<task id>``.
"""

from __future__ import annotations

from . import task_calls
from .index import newest_first, rows as index_rows
from .models import Task
from .steps import Call, Command
from .text import text

SCAN = 200  # rows read per index per read (a round reads on past rows at or before its cursor)


def decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    if not cursor:
        return None
    ms, _, task_id = str(cursor).partition(".")
    if not (ms.isascii() and ms.isdigit()) or len(ms) > 15 or not task_id:
        raise ValueError("malformed cursor")
    return int(ms), task_id


# Newest first; ties in the order ZREVRANGEBYSCORE returns them (by id, descending), so the rows of a
# millisecond that a scan cut short sort after the scan's last row, not before it.
_order = newest_first


def queues(engine) -> Call[list[str]]:
    """Every queue with registered types or submitted tasks."""
    found = yield Command("smembers", (engine.keys.queues(),))
    return sorted({text(q) for q in found} | set(engine.registry.queues()))


def list_tasks(
    engine,
    owner: str | None = None,
    status: str | None = None,
    type: str | None = None,
    queue: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Call[tuple[list[Task], str | None]]:
    """An owner's tasks (every owner's with ``owner=None``, for admins), newest first.

    Returns (tasks, cursor of the next page or None). Raises ValueError for a bad limit or cursor.
    Written as steps (engine/core/steps.py): the Engine and the AsyncEngine run it.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
        raise ValueError("limit must be an integer within 1..500")
    position = decode_cursor(cursor)
    known = yield from queues(engine)
    listed = [queue] if queue in known else ([] if queue else known)
    indexes = [engine.keys.owner_index(q, owner) if owner is not None else engine.keys.queue_index(q) for q in listed]
    out: list[Task] = []
    while indexes:
        rows, frontiers = [], []
        for index in indexes:
            top, offset = (position[0] if position else "+inf"), 0
            while True:
                got = yield from index_rows(index, top, offset, SCAN)
                fresh = [r for r in got if position is None or _order(r) > _order(position)]
                if fresh or len(got) < SCAN:
                    break
                offset += SCAN  # a whole scan at or before the cursor (a burst in its millisecond): read on
            rows += fresh
            if len(got) == SCAN:  # this index may hold more beyond its last row
                frontiers.append(_order(got[-1]))
        rows = sorted(set(rows), key=_order)
        limit_row = min(frontiers) if frontiers else None
        safe = [r for r in rows if limit_row is None or _order(r) <= limit_row]
        if not safe:
            return out, None
        tasks = yield from task_calls.get_many(engine, [r[1] for r in safe], owner)
        for row, task in zip(safe, tasks):
            position = row
            if task is None or (status and task.status.value != status) or (type and task.type != type):
                continue
            out.append(task)
            if len(out) == limit:
                return out, f"{row[0]}.{row[1]}"
        if limit_row is None:
            return out, None
    return out, None
