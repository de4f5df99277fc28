"""The Flask web app of ghostless: pages, JSON API, live status over SSE, login, admin operations,
/metrics. ``create_app(config=None)`` builds it (web/app.py, where its config keys are described).

Its names are loaded on first use (PEP 562), so a process that imports only a light module of the
package (the CLI's ``ghostless.web.serve`` settings, in every worker) does not import Flask, Jinja2
and the whole app: a worker's fork then copies a smaller process for each attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["DEFAULTS", "close_app", "create_app"]

if TYPE_CHECKING:
    from .app import DEFAULTS, close_app, create_app


def __getattr__(name: str):
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
