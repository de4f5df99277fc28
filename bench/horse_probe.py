"""A probe in every fork work-horse, for bench/throughput.py's work-horse phase.

    python bench/horse_probe.py ghostless|plain URL OUT

runs one fork worker in burst mode over what waits in its queue: ghostless's worker (the bench
app's queue ``tput``) or plain RQ's (queue ``plain-horse``, redis-py's DriverInfo resolved once
for its pool, as ghostless's worker does). Each work-horse appends one line to OUT: at each mark,
the minor page faults it has taken since the fork (the pages of its parent's memory it copied, and
new ones) and the microseconds since its first mark, as RQ's ``main_work_horse`` begins. The
marks: RQ's ``perform_job`` starts, the horse's first connection to Redis opens and is open (RQ's
first command opens it), the task function starts and returns, ``perform_job`` returns, the
horse exits; on the ghostless side also the claim, the attempt's start, the
heartbeat's start and the complete, each with its end.
"""

from __future__ import annotations

import functools
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from rq import Worker

PLAIN_QUEUE = "plain-horse"
_marks: list[tuple[str, int, int]] = []


def _mark(name: str) -> None:
    _marks.append((name, resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter_ns() // 1000))


def _marking(fn, label: str):
    """``fn``, marking ``label`` as it starts and ``label_end`` as it returns or raises."""

    @functools.wraps(fn)
    def marked(*args, **kwargs):
        _mark(label)
        try:
            return fn(*args, **kwargs)
        finally:
            _mark(label + "_end")

    return marked


def _around(owner, name: str, label: str) -> None:
    setattr(owner, name, _marking(getattr(owner, name), label))


def install(out: str) -> None:
    """Mark every work-horse RQ's Worker forks from now on."""
    real_horse, real_exit = Worker.main_work_horse, os._exit

    def exiting(code):
        _mark("exit")
        start = _marks[0][2]
        with open(out, "a") as f:
            f.write(" ".join(f"{name}={faults},{at - start}" for name, faults, at in _marks) + "\n")
        real_exit(code)

    def main_work_horse(self, job, queue):
        _marks.clear()
        _mark("horse")
        os._exit = exiting  # RQ ends a work-horse with os._exit
        return real_horse(self, job, queue)

    Worker.main_work_horse = main_work_horse
    _around(Worker, "perform_job", "perform_job")

    real_connect = redis.connection.AbstractConnection.connect

    def connect(self):
        """The horse's first new connection to Redis, marked (RQ's first command opens it)."""
        if self._sock or any(name == "connect" for name, _, _ in _marks):
            return real_connect(self)
        _mark("connect")
        try:
            return real_connect(self)
        finally:
            _mark("connect_end")

    redis.connection.AbstractConnection.connect = connect


def run(side: str, url: str, out: str) -> None:
    install(out)
    if side == "plain":
        from redis.driver_info import resolve_driver_info
        from rq.serializers import JSONSerializer

        import bench.plain_jobs

        bench.plain_jobs.noop = _marking(bench.plain_jobs.noop, "function")
        conn = redis.Redis.from_url(url)
        conn.connection_pool.connection_kwargs["driver_info"] = resolve_driver_info()
        Worker([PLAIN_QUEUE], connection=conn, serializer=JSONSerializer).work(
            burst=True, logging_level="WARNING", with_scheduler=False
        )
        return
    os.environ["GHOSTLESS_REDIS_URL"] = url
    from bench.app import engine
    from ghostless.execution import heartbeat, runner
    from ghostless.execution.worker import run_worker

    noop = engine.registry.get("noop")
    object.__setattr__(noop, "fn", _marking(noop.fn, "function"))
    _around(engine, "claim", "claim")
    _around(runner, "execute", "attempt")
    _around(heartbeat.Heartbeat, "start", "heartbeat_start")
    _around(engine, "complete", "complete")
    run_worker(engine, ["tput"], "fork", burst=True, logging_level="WARNING")


if __name__ == "__main__":
    run(*sys.argv[1:4])
