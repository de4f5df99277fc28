"""Waiting on conditions (never sleeping and hoping)."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.005, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; return that value or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def server_ms(client) -> int:
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def wait_for_server_time(client, at_ms: float, timeout: float = 10.0) -> None:
    """Wait until the Redis server clock (what every script reads) has passed ``at_ms``."""
    wait_until(lambda: server_ms(client) > at_ms, timeout, what=f"server time past {at_ms}")
