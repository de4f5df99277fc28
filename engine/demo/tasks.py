"""Demo task types that behave like the real thing (``ghostless demo``).

``generate_image`` simulates an image model: a wait for a GPU, generation with
progress, an upload; some attempts fail transiently (retried), a few prompts
are refused for good, one marked task crashes its work-horse mid-way (as an
OOM kill would) so the demo shows it being recovered, and the image model has
an outage at the start (while the key OUTAGE exists): the circuit breaker of
the ``image-model`` upstream opens, tasks wait without spending attempts, and
a probe closes it once the model is back. ``usage_report`` is a
periodic task: ``ghostless scheduler`` submits it once an hour (docker-compose.yml).
"""

from __future__ import annotations

import os
import random
import signal

from ghostless import Backoff, Breaker, Engine, PermanentError

engine = Engine.from_url(namespace=os.environ.get("GHOSTLESS_DEMO_NS", "demo"))
SPEED = float(os.environ.get("GHOSTLESS_DEMO_SPEED", "1.0"))  # < 1 runs faster (CI)
OUTAGE = "ghostless-demo:model-outage"  # while this key exists, the simulated model API is down


class UpstreamTimeout(Exception):
    """The (simulated) model API timed out: worth retrying."""


def _pause(ctx, seconds: float) -> None:
    ctx.wait(seconds * SPEED)
    ctx.stop_if_cancelled()  # cancelled or lease lost: stop without an outcome


@engine.task(
    queue="images",
    lease=5,
    timeout=120,
    max_attempts=4,
    backoff=Backoff.exponential(base=0.5, factor=2, cap=5, jitter=0.2),
    stages={"waiting_for_resource": 30, "generating": 60, "uploading": 30},
    permanent_errors=("bad_prompt",),
    upstream="image-model",
    breaker=Breaker(threshold=0.5, min_calls=4, window=20, cooldown=2 * SPEED),
)
def generate_image(ctx, prompt: str, steps: int = 10, crash: bool = False, flaky: float = 0.25):
    if "forbidden" in prompt:
        raise PermanentError(f"prompt {prompt!r} violates the content policy", kind="bad_prompt")
    with ctx.stage("waiting_for_resource"):
        _pause(ctx, random.uniform(0.1, 0.5))
        if engine.redis.exists(OUTAGE):
            raise UpstreamTimeout("model API is down (outage)")
    with ctx.stage("generating"):
        for i in range(steps):
            _pause(ctx, random.uniform(0.05, 0.2))
            ctx.progress((i + 1) / steps, f"step {i + 1} of {steps}")
            if crash and i == steps // 2 and "crashed" not in ctx.checkpoints:
                ctx.checkpoint("crashed", True)  # once: the next attempt gets through
                os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does to a work-horse
        if random.random() < flaky and ctx.attempt < 3:
            raise UpstreamTimeout("model API timed out")
    with ctx.stage("uploading"):
        if "upload_key" not in ctx.checkpoints:
            _pause(ctx, random.uniform(0.1, 0.3))
            ctx.checkpoint("upload_key", f"s3://demo-bucket/{ctx.task_id}.png")
    return {"url": f"https://cdn.example.invalid/{ctx.task_id}.png", "prompt": prompt}


@engine.task(queue="reports", lease=10, timeout=120, max_attempts=3, stages={"counting": 60})
def usage_report(ctx, period: str):
    """The hour's usage report: one task per hour however many schedulers run."""
    with ctx.stage("counting"):
        counts = engine.stats().get("images", {}).get("counts", {})
    return {"period": period, "counts": counts}


engine.periodic("usage_report", cron="0 * * * *", period_arg="period")
