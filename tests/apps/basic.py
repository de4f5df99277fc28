"""Task types for worker tests, run by real worker processes (``--app tests.apps.basic:engine``).

Each function appends what it did to a side-effect log (the Redis list
``log:<task_id>``, entries ``<attempt>:<what>:<pid>``), so tests can tell
executions apart from reported outcomes.

``register(engine)`` adds the types to any engine: a test process registers
them on an engine of its own (on its private redis-server) to submit and read
tasks. The module attribute ``engine`` is built on first use, from
GHOSTLESS_REDIS_URL and GHOSTLESS_TEST_NS, so importing this module connects
to nothing.
"""

from __future__ import annotations

import os
import time

from ghostless import Backoff, Config, Engine, PermanentError
from tests.support.apps import lazy_engine

QUEUE = "work"
LEASE = float(os.environ.get("GHOSTLESS_TEST_LEASE", "1.5"))
SLOW_BEAT_LEASE = 4.0  # `gated_slow`: a lease (and so a shutdown grace) long enough to act within
# The engine a worker process runs (``--app tests.apps.basic:engine``).
app_engine, __getattr__ = lazy_engine(
    lambda: register(Engine.from_url(namespace=os.environ.get("GHOSTLESS_TEST_NS", "gl"), config=config()))
)


def config() -> Config:
    """Engine settings from the environment (GHOSTLESS_TEST_REQUEUE_AFTER: seconds before the
    sweeper checks that a QUEUED task's RQ job still exists)."""
    requeue_after = os.environ.get("GHOSTLESS_TEST_REQUEUE_AFTER")
    return Config(requeue_after=float(requeue_after)) if requeue_after else Config()


def note(ctx, what: str) -> None:
    # The engine running the task (a test that runs one in-process has no GHOSTLESS_REDIS_URL).
    ctx._engine.redis.rpush(f"log:{ctx.task_id}", f"{ctx.attempt}:{what}:{os.getpid()}")


def gate_key(task_id: str) -> str:
    """Redis key that lets a `gated` task finish once it exists."""
    return f"gate:{task_id}"


def register(engine: Engine, lease: float = LEASE, only: tuple[str, ...] | None = None) -> Engine:
    """Register the test task types on ``engine`` (all, or the names in ``only``)."""

    def task(**kw):
        def add(fn):
            if only is None or fn.__name__ in only:
                engine.task(**kw)(fn)
            return fn

        return add

    @task(
        queue=QUEUE,
        lease=lease,
        timeout=60,
        max_attempts=3,
        backoff=Backoff.fixed([0.2, 0.4]),
        stages={"waiting_for_resource": 10, "generating": 30, "uploading": 10},
    )
    def render(ctx, prompt, steps=3, hold=0.0):
        note(ctx, "start")
        with ctx.stage("waiting_for_resource"):
            pass
        with ctx.stage("generating"):
            for i in range(steps):
                ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
        ctx.stage("uploading")
        # `hold` keeps the task running (in short sleeps, so a cancelled task notices).
        end = time.monotonic() + hold
        while time.monotonic() < end and not ctx.cancelled:
            time.sleep(0.02)
        note(ctx, "done")
        return {"url": f"https://example.invalid/{prompt}.png", "pid": os.getpid()}

    @task(queue=QUEUE, lease=lease, timeout=60, max_attempts=3, backoff=Backoff.fixed([0.2, 0.4]))
    def flaky(ctx, fail_times=1, permanent=False):
        note(ctx, "start")
        if permanent:
            raise PermanentError("prompt rejected by policy", kind="bad_prompt")
        if ctx.attempt <= fail_times:
            raise ConnectionError(f"upstream hiccup on attempt {ctx.attempt}")
        return {"attempt": ctx.attempt}

    @task(
        queue=QUEUE,
        lease=lease,
        timeout=60,
        max_attempts=4,
        backoff=Backoff.exponential(base=0.4, factor=2, cap=1.0, jitter=0.25),
    )
    def unlucky(ctx):
        """Always fails (retryable): its retries follow an exponential backoff with jitter."""
        note(ctx, "start")
        raise ConnectionError(f"upstream down on attempt {ctx.attempt}")

    @task(queue=QUEUE, lease=lease, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))
    def sleepy(ctx, seconds=30.0, ignore_cancel=False):
        """Runs for `seconds` (ignoring ctx.cancelled when asked: then only force stops it)."""
        note(ctx, "start")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if ctx.cancelled and not ignore_cancel:
                note(ctx, "noticed-cancel")
                return {"stopped": True, "pid": os.getpid()}
            time.sleep(0.02)
        note(ctx, "done")
        return {"slept": seconds, "pid": os.getpid()}

    def gated(ctx, tag=""):
        """Runs until the test creates gate_key(task id), ignoring ctx.cancelled; returns its args."""
        note(ctx, "start")
        while not ctx._engine.redis.exists(gate_key(ctx.task_id)):
            time.sleep(0.01)
        note(ctx, "done")
        return {"tag": tag, "pid": os.getpid()}

    task(queue=QUEUE, lease=lease, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))(gated)

    def gated_slow(ctx, tag=""):
        return gated(ctx, tag)

    task(queue=QUEUE, lease=SLOW_BEAT_LEASE, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))(gated_slow)

    @task(
        queue=QUEUE, lease=lease, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.3]), stages={"generating": 0.6}
    )
    def stuck(ctx):
        """Heartbeats fine but overstays its 0.6 s `generating` stage: stage_timeout:generating."""
        note(ctx, "start")
        ctx.stage("generating")
        while not ctx.wait(0.02):
            pass
        note(ctx, "noticed-" + ctx.stop_reason.split(" ")[0])
        return {"stopped": True}

    @task(queue=QUEUE, lease=lease, timeout=1.0, max_attempts=1)
    def overtime(ctx):
        """Heartbeats fine but outlives its 1 s attempt timeout: attempt_timeout."""
        note(ctx, "start")
        while not ctx.wait(0.02):
            pass
        note(ctx, "noticed-" + ctx.stop_reason.split(" ")[0])
        return {"stopped": True}

    @task(queue=QUEUE, lease=lease, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))
    def blocked(ctx, seconds=4.0):
        """One blocking call (an upload, a GPU call): a forced stop lands only when it returns."""
        note(ctx, "start")
        time.sleep(seconds)
        note(ctx, "end")
        return {"pid": os.getpid()}

    @task(queue=QUEUE, lease=lease, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))
    def unreleasable(ctx):
        """Its process cannot release it (as when Redis refuses writes at that moment); runs on."""
        import redis

        def refuse(*args, **kwargs):
            raise redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")

        app_engine().release = ctx._engine.release = refuse
        note(ctx, "start")
        while not ctx._engine.redis.exists(gate_key(ctx.task_id)):
            time.sleep(0.02)
        note(ctx, "done")
        return {"pid": os.getpid()}

    @task(queue=QUEUE, lease=lease, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))
    def alive(ctx, path, seconds=30.0):
        """Writes the time into the file `path` every 20 ms, ignoring ctx.cancelled (a sign of life
        that needs no Redis): only a forced stop ends it early."""
        note(ctx, "start")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with open(path + ".tmp", "w") as f:
                f.write(repr(time.time()))
            os.replace(path + ".tmp", path)
            time.sleep(0.02)
        return {"pid": os.getpid()}

    @task(queue=QUEUE, lease=lease, timeout=60, max_attempts=1)
    def bad_result(ctx):
        note(ctx, "start")
        return {"not json": object()}

    return engine
