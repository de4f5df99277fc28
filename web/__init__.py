"""The Flask web app of ghostless: pages, JSON API, live status over SSE, login, admin operations,
/metrics. ``create_app(config=None)`` builds it (web/app.py, where its config keys are described)."""

from .app import DEFAULTS, close_app, create_app

__all__ = ["DEFAULTS", "close_app", "create_app"]
