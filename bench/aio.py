"""The asyncio client: what ``AsyncEngine.submit`` costs beside ``Engine.submit``, and what its RQ
dispatch in a worker thread costs.

One private redis-server (AOF, appendfsync everysec). Phases, each ROUNDS times interleaved,
medians reported (per submit, microseconds; N submits one after another, or N at once):
  sync-rq      Engine.submit with the RQ dispatcher (submit script, dispatch script, RQ enqueue)
  async-rq     AsyncEngine.submit, the same: the submit script on redis.asyncio, then the dispatch
               script and the RQ enqueue in a worker thread (asyncio.to_thread)
  sync-none    Engine.submit without a dispatcher (the submit script alone)
  async-none   AsyncEngine.submit without a dispatcher
  async-rq-x   N AsyncEngine.submit at once (asyncio.gather) with RQ: submits per second
  sync-get / async-get   one read of a task

Target: async-rq within 1.5 x sync-rq per submit (the thread hop is small beside three round
trips); async-none within 1.5 x sync-none.

Run: .venv/bin/python bench/aio.py  (about 20 s)
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio

from bench._common import (
    AOF_EVERYSEC,
    ARGS,
    Engine,
    machine,
    median,
    persistence,
    private_redis,
    quiet_engine_logs,
    run_main,
    verdict,
)
from ghostless import AsyncEngine

ROUNDS, N = 5, 300
RATIO_TARGET = 1.5


def engine_on(client, dispatcher) -> Engine:
    engine = Engine(client, namespace="bench", dispatcher=dispatcher)

    @engine.task(name="bench_job", queue="aio", lease=60, timeout=600)
    def bench_job(ctx, prompt):  # pragma: no cover - never run
        return None

    return engine


def sync_submits(engine: Engine) -> float:
    start = time.perf_counter()
    for _ in range(N):
        engine.submit("bench_job", ARGS, owner="bench")
    return (time.perf_counter() - start) / N * 1e6


def async_submits(aengine: AsyncEngine, at_once: bool = False) -> float:
    async def body():
        await aengine.get("aio.0123456789abcdef0123")  # connects before the clock starts
        start = time.perf_counter()
        if at_once:
            await asyncio.gather(*(aengine.submit("bench_job", ARGS, owner="bench") for _ in range(N)))
        else:
            for _ in range(N):
                await aengine.submit("bench_job", ARGS, owner="bench")
        elapsed = time.perf_counter() - start
        await aengine.redis.aclose()
        return elapsed / N * 1e6

    return asyncio.run(body())


def gets(engine: Engine, aengine: AsyncEngine, task_id: str) -> tuple[float, float]:
    start = time.perf_counter()
    for _ in range(N):
        engine.get(task_id)
    sync = (time.perf_counter() - start) / N * 1e6

    async def body():
        await aengine.get(task_id)
        start = time.perf_counter()
        for _ in range(N):
            await aengine.get(task_id)
        elapsed = time.perf_counter() - start
        await aengine.redis.aclose()
        return elapsed / N * 1e6

    return sync, asyncio.run(body())


def main() -> int:
    with quiet_engine_logs():
        return _main()


def _main() -> int:
    print(machine())
    with private_redis(*AOF_EVERYSEC) as server:
        client = server.client()
        print(f"server: {persistence(client)}; N={N} submits per phase, {ROUNDS} rounds, medians")
        rq, none = engine_on(client, "rq"), engine_on(client, None)
        # N submits at once take N connections (redis.asyncio raises past max_connections, default 100)
        aclient = lambda: redis.asyncio.Redis(host="127.0.0.1", port=server.port, max_connections=N + 10)  # noqa: E731
        phases: dict[str, list[float]] = {}
        for _ in range(ROUNDS):
            client.flushall()
            for name, run in (
                ("sync-rq", lambda: sync_submits(rq)),
                ("async-rq", lambda: async_submits(AsyncEngine(aclient(), rq))),
                ("sync-none", lambda: sync_submits(none)),
                ("async-none", lambda: async_submits(AsyncEngine(aclient(), none))),
                ("async-rq-x", lambda: async_submits(AsyncEngine(aclient(), rq), at_once=True)),
            ):
                phases.setdefault(name, []).append(run())
            task = none.submit("bench_job", ARGS, owner="bench")
            sync_get, async_get = gets(none, AsyncEngine(aclient(), none), task.id)
            phases.setdefault("sync-get", []).append(sync_get)
            phases.setdefault("async-get", []).append(async_get)
        m = {name: median(values) for name, values in phases.items()}
        for name, value in m.items():
            extra = f"  ({1e6 / value:,.0f} submits/s)" if name == "async-rq-x" else ""
            print(f"aio: {name:<11} {value:8.0f} us per call{extra}")
        ratio_rq, ratio_none = m["async-rq"] / m["sync-rq"], m["async-none"] / m["sync-none"]
        ok = ratio_rq <= RATIO_TARGET and ratio_none <= RATIO_TARGET
        print(
            f"aio: async/sync per submit: {ratio_rq:.2f} x with RQ dispatch, {ratio_none:.2f} x without "
            f"(target <= {RATIO_TARGET} x) {verdict(ok)}"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    run_main(main)
