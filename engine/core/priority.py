"""Task priority: an integer in MIN..MAX; higher starts first, strictly; FIFO within a priority.

The order is each queue's ``ready`` zset, scored ``-priority * SPAN + dispatch sequence``, so a
task's place in line (``Task.position``) is one ZRANK: O(log N). A queue has one RQ queue
(engine/execution/rq_dispatch.py), whose jobs come in dispatch order: a job's claim starts the head
of the ready line instead of its own task when the head is of a higher priority (lua/claim.lua), so
the order between priorities is strict whatever RQ's.
"""

from __future__ import annotations

MIN, MAX = -10, 10
SPAN = 2**40  # dispatch sequence numbers per priority band (score stays an exact double)


def check(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not MIN <= priority <= MAX:
        raise ValueError(f"priority must be an integer within {MIN}..{MAX} (higher starts first)")
    return priority
