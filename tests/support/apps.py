"""The test apps' lazy ``engine`` attribute (``--app tests.apps.basic:engine``): built on first use,
from GHOSTLESS_REDIS_URL, so importing an app module connects to nothing."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ghostless import Engine


def lazy_engine(build: Callable[[], Engine]):
    """(``app_engine``, a module ``__getattr__``): ``app_engine()`` builds the engine once with
    ``build``; the module's ``engine`` attribute is that engine."""
    app_engine = functools.cache(build)

    def module_getattr(name: str):
        if name == "engine":
            return app_engine()
        raise AttributeError(name)

    return app_engine, module_getattr
