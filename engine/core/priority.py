"""Task priority: an integer in MIN..MAX; higher starts first, strictly; FIFO within a priority.

Each priority is its own RQ list (engine/execution/rq_dispatch.py) and workers pop the
lists highest first, so the order is strict. The same order is kept in each
queue's ``ready`` zset, scored ``-priority * SPAN + dispatch sequence``, so a
task's place in line (``Task.position``) is one ZRANK: O(log N).
"""

from __future__ import annotations

MIN, MAX = -10, 10
SPAN = 2**40  # dispatch sequence numbers per priority band (score stays an exact double)
LEVELS = tuple(range(MAX, MIN - 1, -1))  # highest first: the order workers take them in


def check(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int) or not MIN <= priority <= MAX:
        raise ValueError(f"priority must be an integer within {MIN}..{MAX} (higher starts first)")
    return priority
