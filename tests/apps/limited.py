"""A task type that calls a rate-limited upstream, for worker tests
(``--app tests.apps.limited:engine``). ``register(engine)`` adds it to the test process's engine;
the module attribute ``engine`` is built on first use from GHOSTLESS_REDIS_URL and GHOSTLESS_TEST_NS."""

from __future__ import annotations

import os

from ghostless import Engine, Rate

QUEUE = "work"
RATE = Rate(3, 0.5)  # attempts of "model-api" that may start in any half second
_engine: Engine | None = None


def __getattr__(name: str):
    if name == "engine":
        return app_engine()
    raise AttributeError(name)


def app_engine() -> Engine:
    global _engine
    if _engine is None:
        _engine = register(Engine.from_url(namespace=os.environ.get("GHOSTLESS_TEST_NS", "gl")))
    return _engine


def register(engine: Engine) -> Engine:
    @engine.task(queue=QUEUE, lease=5, max_attempts=2, upstream="model-api", breaker=False, rate=RATE)
    def call_model(ctx):
        return {"attempt": ctx.attempt}

    return engine
