"""An app for the operator CLI and scheduler tests (``--app tests.apps.ops:engine``).

``engine`` is a factory (``load_app`` calls it on every command): an Engine without an
executor (tasks wait in PENDING) on GHOSTLESS_REDIS_URL or, with GHOSTLESS_TEST_FAKE=1,
on this module's in-process fakeredis server ``FAKE``, which the test shares. It
registers the contract tests' task types, an internal one (``housekeeping``) and one periodic task, ``tick``, every
GHOSTLESS_TEST_CRON (default: every second; empty: none).
"""

from __future__ import annotations

import os

import fakeredis
import redis

from ghostless import Engine
from ghostless.core.connect import connect
from tests.conftest import register_test_types

FAKE = fakeredis.FakeServer()
NAMESPACE = "ops"


def build(client) -> Engine:
    engine = register_test_types(
        Engine(client, namespace=os.environ.get("GHOSTLESS_TEST_NS", NAMESPACE), dispatcher=None)
    )
    # Submitted by engine code only (submit(..., internal=True)): the CLI's submit refuses it.
    engine.task(name="housekeeping", queue="images", internal=True)(lambda ctx: None)
    cron = os.environ.get("GHOSTLESS_TEST_CRON", "* * * * * *")
    if cron:  # set it empty for an app without periodic tasks
        engine.periodic(
            "tick", cron=cron, type="render", args={"prompt": "tick"}, owner="scheduler", period_arg="period"
        )
    return engine


def engine() -> Engine:
    if os.environ.get("GHOSTLESS_TEST_FAKE") == "1":
        return build(fakeredis.FakeRedis(server=FAKE))
    url = os.environ.get("GHOSTLESS_REDIS_URL")
    if not url:
        raise RuntimeError("tests.apps.ops needs GHOSTLESS_REDIS_URL or GHOSTLESS_TEST_FAKE=1")
    if "+cluster://" in url:
        return build(connect(url))
    return build(redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5))
