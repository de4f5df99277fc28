"""Each web user's submit quota (engine/core/quota.py): the app's default with the user's own limits.

``GHOSTLESS_QUOTA`` (config; else env ``GHOSTLESS_QUOTA``, a JSON object of Quota fields over
the defaults, or ``off``) is the default for every user, ``ghostless.core.quota.WEB_DEFAULT`` unless set;
None (``off``) submits without limits. A user's record may override any field
(``ghostless user quota NAME ...``); records are read at most every ``GHOSTLESS_QUOTA_CACHE``
seconds per process, so a change takes effect within that.
"""

from __future__ import annotations

import json
import os
import threading
import time

from flask import Flask, current_app

from ghostless.core.quota import WEB_DEFAULT, Quota, parse_overrides

from .deps import get_engine

_lock = threading.Lock()


def configured(value) -> Quota | None:
    """The app's default quota from a config value: a Quota, a dict of fields over WEB_DEFAULT,
    None or "off" (no limits)."""
    if value is None or value == "off":
        return None
    if isinstance(value, Quota):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError("GHOSTLESS_QUOTA must be a JSON object of quota fields, or off") from None
    return WEB_DEFAULT.with_overrides(parse_overrides(value))


def init_app(app: Flask) -> None:
    raw = app.config.get("GHOSTLESS_QUOTA", os.environ.get("GHOSTLESS_QUOTA") or WEB_DEFAULT)
    app.config["GHOSTLESS_QUOTA"] = configured(raw)
    app.config.setdefault("GHOSTLESS_QUOTA_CACHE", 10.0)
    app.extensions["ghostless.quotas"] = {}


def quota_for(name: str) -> Quota | None:
    """The quota ``name``'s submits and edits go through (None: no limits)."""
    base = current_app.config["GHOSTLESS_QUOTA"]
    cache = current_app.extensions["ghostless.quotas"]
    now = time.monotonic()
    hit = cache.get(name)
    if hit is None or now - hit[0] > current_app.config["GHOSTLESS_QUOTA_CACHE"]:
        hit = (now, get_engine().users.quota_overrides(name))
        with _lock:
            if len(cache) > 10_000:  # users come and go: keep the cache bounded
                cache.clear()
            cache[name] = hit
    quota = (base or Quota()).with_overrides(hit[1]) if hit[1] else base
    return None if quota is None or quota.unlimited else quota
