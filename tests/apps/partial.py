"""A worker app that runs only the ``render`` type of tests.apps.basic, on the same queue
(``--app tests.apps.partial:engine``): jobs of the other types reach it and must be refused
without running anything."""

from __future__ import annotations

import os

from ghostless import Engine
from tests.apps import basic
from tests.support.apps import lazy_engine

app_engine, __getattr__ = lazy_engine(
    lambda: basic.register(Engine.from_url(namespace=os.environ.get("GHOSTLESS_TEST_NS", "gl")), only=("render",))
)
