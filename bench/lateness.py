"""Promotion lateness of short retries: how long after its ``next_retry_at`` a retry is promoted.

    .venv/bin/python bench/lateness.py [--trials 40]

(also printed by bench/recovery.py). A real ``ghostless sweeper`` (default ``--interval 1.0``) runs
against a private redis-server; the bench claims each task itself and fails it with a retry due
0.2-0.5 s later, at random moments of the sweeper's sleep. Both ends are Redis server time: the
task's ``next_retry_at`` written by fail.lua and the ``promote`` event's time in its history.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.wait import wait_until  # noqa: E402

TYPE = "short_retry"


def promotion_lateness(engine, trials: int, rng: random.Random | None = None) -> list[float]:
    """Seconds from each retry's due time to its promotion, for ``trials`` retries due in 0.2-0.5 s.
    Needs a sweeper running on the engine's Redis."""
    rng = rng or random.Random(7)
    due: dict[str, float] = {}
    for _ in range(trials):
        task = engine.submit(TYPE, {}, owner="bench")
        lease = engine.claim(task.id, "bench-lateness")
        engine.fail(lease, "flaky", "bench", retry_in=rng.uniform(0.2, 0.5))
        due[task.id] = int(engine.redis.hget(engine.keys.task(task.id).task, "next_retry_at")) / 1000
        time.sleep(rng.uniform(0.0, 1.0))  # sparse failures: each lands somewhere in the sweeper's sleep

    def promoted_at(task_id: str) -> float | None:
        return next((e.at for e in engine.history(task_id) if e.verb == "promote"), None)

    wait_until(lambda: all(promoted_at(t) is not None for t in due), 30, what="every retry promoted")
    return [promoted_at(t) - at for t, at in due.items()]


def main() -> int:
    import importlib
    import os

    from bench._common import machine, private_redis, stop
    from bench.recovery import summary
    from tests.support.procs import app_env, start_sweeper

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    a = ap.parse_args()
    print(machine())
    with private_redis("--appendonly", "yes") as srv:
        os.environ["GHOSTLESS_REDIS_URL"] = srv.url
        os.environ["GHOSTLESS_BENCH_NS"] = "bench"
        import bench.app

        engine = importlib.reload(bench.app).engine  # on this server, even if imported before
        sweeper = start_sweeper(app_env(srv.url, "bench", GHOSTLESS_BENCH_NS="bench"), "bench.app:engine", interval=1.0)
        try:
            wait_until(lambda: "sweeper started" in sweeper.output(), 30, what="the sweeper")
            late = promotion_lateness(engine, a.trials)
        finally:
            stop(sweeper)
    print(f"promotion lateness of short retries (due in 0.2-0.5 s, sweeper --interval 1): {summary(late)}")
    return 0


if __name__ == "__main__":
    from bench._common import run_main

    run_main(main)
