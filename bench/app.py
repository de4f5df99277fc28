"""Task types for the benchmarks, run by real workers (``--app bench.app:engine``).

Environment: ``GHOSTLESS_REDIS_URL`` (a private redis-server, never the shared 6379) and
``GHOSTLESS_BENCH_NS`` (the key namespace, default ``bench``).

- ``victim`` / ``victim_5s``: recovery bench (bench/recovery.py). Each execution first stamps the
  Redis server TIME into ``bench:entered:<task id>`` ("<attempt> <server time in us> <pid>"); the
  first attempt then holds until it is killed, a later attempt returns at once.
  ``victim`` uses the engine's default lease (TaskType.lease, 15 s), ``victim_5s`` a 5 s lease.
- ``noop``: throughput bench (bench/throughput.py): returns None.

Plain-RQ counterparts live in bench/plain_jobs.py (no engine import: a plain RQ horse should pay
for nothing ghostless needs).
"""

from __future__ import annotations

import os
import time

from ghostless import Engine

engine = Engine.from_url(namespace=os.environ.get("GHOSTLESS_BENCH_NS", "bench"))

ENTERED = "bench:entered:{}"


def stamp(key: str, attempt: int) -> None:
    """Record entry: the Redis server TIME, read first thing (then pushed)."""
    sec, usec = engine.redis.time()
    engine.redis.rpush(key, f"{attempt} {int(sec) * 1_000_000 + int(usec)} {os.getpid()}")


def _victim(ctx, hold: float = 300.0):
    stamp(ENTERED.format(ctx.task_id), ctx.attempt)
    if ctx.attempt == 1:
        end = time.monotonic() + hold
        while time.monotonic() < end and not ctx.cancelled:
            ctx.wait(0.05)
    return {"attempt": ctx.attempt}


# No lease argument: the engine's default (TaskType.lease = 15 s).
engine.task("victim", queue="recovery", timeout=600, max_attempts=3)(_victim)
engine.task("victim_5s", queue="recovery", lease=5.0, timeout=600, max_attempts=3)(_victim)


def noop(ctx, n=0):
    return None


engine.task("noop", queue="tput", timeout=60, max_attempts=1)(noop)


def short_retry(ctx):
    return None


# bench/lateness.py: claimed and failed by the bench itself, retried after 0.2-0.5 s.
engine.task("short_retry", queue="lateness", lease=30, timeout=60, max_attempts=2)(short_retry)
