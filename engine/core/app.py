"""Finding the user's engine: ``--app module:attribute`` or ``GHOSTLESS_APP``, the way Flask
and Celery name apps."""

from __future__ import annotations

import importlib
import os
import sys

from .engine import Engine


class AppError(Exception):
    """The app could not be found or is not an Engine (a one-line message for the CLI)."""


def load_app(spec: str | None = None, redis_url: str | None = None) -> Engine:
    """Import ``module:attribute`` (default attribute ``engine``); a callable is called.

    ``redis_url`` (or GHOSTLESS_REDIS_URL) is exported before the import, so an
    app that builds its engine with ``Engine.from_url()`` connects there.
    """
    spec = spec or os.environ.get("GHOSTLESS_APP")
    if not spec:
        raise AppError("no app: pass --app module:engine or set GHOSTLESS_APP")
    if redis_url:
        os.environ["GHOSTLESS_REDIS_URL"] = redis_url
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise AppError(f"cannot import app module {module_name!r}: {e}") from None
    obj = getattr(module, attr or "engine", None)
    if obj is None:
        raise AppError(f"module {module_name!r} has no attribute {attr or 'engine'!r}")
    if callable(obj) and not isinstance(obj, Engine):
        obj = obj()
    if not isinstance(obj, Engine):
        raise AppError(f"{spec} is a {type(obj).__name__}, not a ghostless Engine")
    return obj
