"""Task types for worker tests, run by real worker processes (``--app tests.apps.basic:engine``).

Each function appends what it did to a side-effect log (a Redis list), so tests
can tell executions apart from reported outcomes.
"""
from __future__ import annotations

import os
import time

from engine import Backoff, Engine, PermanentError

engine = Engine.from_url(namespace=os.environ.get("GHOSTLESS_TEST_NS", "gl"))
LEASE = float(os.environ.get("GHOSTLESS_TEST_LEASE", "1.5"))


def note(ctx, what: str) -> None:
    engine.redis.rpush(f"log:{ctx.task_id}", f"{ctx.attempt}:{what}:{os.getpid()}")


@engine.task(queue="work", lease=LEASE, timeout=60, max_attempts=3, backoff=Backoff.fixed([0.2, 0.4]),
             stages={"waiting_for_resource": 10, "generating": 30, "uploading": 10})
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


@engine.task(queue="work", lease=LEASE, timeout=60, max_attempts=3, backoff=Backoff.fixed([0.2, 0.4]))
def flaky(ctx, fail_times=1, permanent=False):
    note(ctx, "start")
    if permanent:
        raise PermanentError("prompt rejected by policy", kind="bad_prompt")
    if ctx.attempt <= fail_times:
        raise ConnectionError(f"upstream hiccup on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


@engine.task(queue="work", lease=LEASE, timeout=60, max_attempts=2, backoff=Backoff.fixed([0.1]))
def sleepy(ctx, seconds=30.0, ignore_cancel=False):
    """Runs for `seconds` (ignoring ctx.cancelled when asked: then only force stops it)."""
    note(ctx, "start")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.cancelled and not ignore_cancel:
            note(ctx, "noticed-cancel")
            return {"stopped": True}
        time.sleep(0.02)
    note(ctx, "done")
    return {"slept": seconds}


@engine.task(queue="work", lease=LEASE, timeout=60, max_attempts=1)
def bad_result(ctx):
    return {"not json": object()}
