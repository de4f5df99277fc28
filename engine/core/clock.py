"""Time as Redis sees it, and the pause before retrying a call that failed.

Deadlines, periods and stream ids are Redis's milliseconds (the scripts read TIME), never this
machine's clock: a process compares with them only through ``server_ms``.
"""

from __future__ import annotations

RETRY_BASE = 0.1  # seconds: the first pause after a failure, doubled per further failure


def server_ms(client) -> int:
    """Redis TIME in whole milliseconds."""
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def retry_delay(errors: int, ceiling: float, doublings: int = 5) -> float:
    """Seconds to wait after ``errors`` failures in a row: RETRY_BASE doubled per failure, at most
    ``doublings`` times, and never more than ``ceiling``."""
    return min(ceiling, RETRY_BASE * 2 ** min(max(errors, 0), doublings))
