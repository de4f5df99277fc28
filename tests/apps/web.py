"""An app for web CLI tests (``--app tests.apps.web:engine``).

``engine`` is a factory (``load_app`` calls it): an Engine on GHOSTLESS_REDIS_URL, or, with
GHOSTLESS_TEST_FAKE=1, on this module's in-process fakeredis server (``FAKE``), so CLI
commands run in the test process can share a fakeredis with the test.
"""

from __future__ import annotations

import os

import fakeredis

from ghostless import Engine

FAKE = fakeredis.FakeServer()


def engine() -> Engine:
    from tests.conftest import register_test_types

    namespace = os.environ.get("GHOSTLESS_TEST_NS", "t")
    if os.environ.get("GHOSTLESS_TEST_FAKE") == "1":
        return register_test_types(Engine(fakeredis.FakeRedis(server=FAKE), namespace=namespace, dispatcher=None))
    return register_test_types(Engine.from_url(namespace=namespace, dispatcher=None))
