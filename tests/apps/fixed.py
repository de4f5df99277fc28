"""An app that builds its own Redis client on a fixed address (``GHOSTLESS_TEST_FIXED_PORT``), not
with ``Engine.from_url()``: ``--redis-url`` cannot move it (the CLI warns)."""

from __future__ import annotations

import os

import redis

from ghostless import Engine


def engine() -> Engine:
    client = redis.Redis(host="127.0.0.1", port=int(os.environ["GHOSTLESS_TEST_FIXED_PORT"]), socket_timeout=5)
    return Engine(client, namespace="fixed", dispatcher=None)
