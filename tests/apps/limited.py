"""A task type that calls a rate-limited upstream, for worker tests
(``--app tests.apps.limited:engine``). ``register(engine)`` adds it to the test process's engine;
the module attribute ``engine`` is built on first use from GHOSTLESS_REDIS_URL and GHOSTLESS_TEST_NS."""

from __future__ import annotations

import os

from ghostless import Engine, Rate
from tests.support.apps import lazy_engine

QUEUE = "work"
RATE = Rate(3, 0.5)  # attempts of "model-api" that may start in any half second
app_engine, __getattr__ = lazy_engine(
    lambda: register(Engine.from_url(namespace=os.environ.get("GHOSTLESS_TEST_NS", "gl")))
)


def register(engine: Engine) -> Engine:
    @engine.task(queue=QUEUE, lease=5, max_attempts=2, upstream="model-api", breaker=False, rate=RATE)
    def call_model(ctx):
        return {"attempt": ctx.attempt}

    return engine
