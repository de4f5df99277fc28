"""Open many SSE streams at once over raw loopback sockets (asyncio) and sort what each got.

``burst(port, requests)`` opens one connection per (path, bearer token), all at once, sends each request,
and reads each answer until its first ``snapshot`` event (opened), a ``retry:``-only end (retry:
the server's EventSource-safe refusal), an error status, or the deadline. Used by
tests/web/test_burst.py and runnable for a measurement:

    python -m tests.web.burst PORT TOKEN N TASK_ID...  (N streams over the tasks, in turn)
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter


async def _open(port: int, path: str, token: str, deadline: float, opened: list) -> tuple[str, float]:
    start = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), max(0.01, deadline - time.monotonic())
        )
    except (OSError, asyncio.TimeoutError) as e:
        return f"connect:{type(e).__name__}", 0.0
    opened.append(writer)  # held open until every stream has answered, as browsers hold theirs
    try:
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Accept: text/event-stream\r\n\r\n".encode()
        )
        data = b""
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.monotonic()))
            data += chunk
            if not data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data:
                return f"status:{data[9:12].decode(errors='replace')}", 0.0
            if b"event: snapshot" in data:
                return "opened", time.monotonic() - start
            if not chunk:
                return ("retry" if b"retry: " in data else "ended"), 0.0
    except asyncio.TimeoutError:
        return "timeout", 0.0
    except OSError as e:
        return f"reset:{type(e).__name__}", 0.0


async def _burst(port: int, requests: list[tuple[str, str]], timeout: float, during=None):
    deadline, writers = time.monotonic() + timeout, []
    try:
        results = await asyncio.gather(*(_open(port, path, token, deadline, writers) for path, token in requests))
        if during is not None:
            await asyncio.get_running_loop().run_in_executor(None, during)
        return results
    finally:
        for writer in writers:
            writer.close()


def burst(
    port: int, requests: list[tuple[str, str]], timeout: float = 30.0, during=None
) -> tuple[Counter, list[float]]:
    """(count of outcomes by kind, seconds to the snapshot of each opened stream); ``during()``
    runs (in a thread) once every stream has answered, while they are all still open."""
    results = asyncio.run(_burst(port, requests, timeout, during))
    return Counter(kind for kind, _ in results), sorted(t for kind, t in results if kind == "opened")


if __name__ == "__main__":
    port, token, n, task_ids = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    began = time.monotonic()
    requests = [(f"/api/tasks/{task_ids[i % len(task_ids)]}/events", token) for i in range(n)]
    counts, times = burst(port, requests, timeout=60)
    took = time.monotonic() - began

    def p(q):
        return times[min(len(times) - 1, int(q * len(times)))] if times else None

    print(dict(counts), f"in {took:.1f}s", f"snapshot p50={p(0.5)} p99={p(0.99)}")
