"""The Flask web app: pages, JSON API, live status over SSE, login, admin operations, /metrics.

``create_app(config=None)`` builds it. Config keys (besides Flask's own):

- ``GHOSTLESS_ENGINE``: the Engine to serve; else the app named by ``GHOSTLESS_APP``
  (``module:attribute``, as ``ghostless worker --app``), loaded on first use.
- ``SECRET_KEY``: signs session cookies; else env ``GHOSTLESS_SECRET_KEY``; else a random
  key per process (logged: sessions then die with the process and do not span workers, so
  ``ghostless web`` refuses to start several processes without one: web/serve.py).
- ``GHOSTLESS_LOGIN_LIMIT``/``_WINDOW``, ``GHOSTLESS_BEARER_LIMIT``/``_WINDOW``: failed logins
  and failed bearer checks allowed per client address and window (web/limits.py).
- ``GHOSTLESS_PROXIES``: how many reverse proxies in front append ``X-Forwarded-For``/``-Proto``
  (werkzeug's ProxyFix trusts that many); 0 (default): the client is the socket's peer.
  These five also come from the environment variables of the same names.
- ``GHOSTLESS_SSE_KEEPALIVE`` (s), ``GHOSTLESS_SSE_RETRY_MS``, ``GHOSTLESS_SSE_BUFFER``
  (events per client), ``GHOSTLESS_BROKER_BLOCK_MS`` (XREAD block), ``GHOSTLESS_LONGPOLL_MAX``
  (s), ``GHOSTLESS_STUCK_AFTER`` (s a task may wait in PENDING/QUEUED before it counts as stuck),
  ``GHOSTLESS_DASHBOARD_CACHE`` (s the dashboard's shared numbers are reused across viewers).
- Held requests (web/held.py): ``GHOSTLESS_STREAMS_PER_USER`` (8) open SSE streams and
  ``GHOSTLESS_LONGPOLLS_PER_USER`` (8) waiting long-polls per user and process;
  ``GHOSTLESS_HELD_MAX`` (200; web/serve.py sets it below the server's threads or connections)
  of both together per process; ``GHOSTLESS_BUSY_RETRY_MS`` (10000): when a refused stream's
  EventSource reconnects, and a refused long-poll's Retry-After. These four also come from the
  environment variables of the same names (so ``ghostless web`` can set them).
- ``GHOSTLESS_REDIS_CONNECTIONS`` (8; 0: the app's own client), ``GHOSTLESS_REDIS_WAIT`` (30 s): the
  web's bounded Redis pool and how long a request waits for a connection (web/pool.py);
  ``GHOSTLESS_REDIS_BATCH`` (200; 0: one by one): the most credential and snapshot reads of
  concurrent requests sent in one pipeline (web/coalesce.py); all three also from the environment.
- ``GHOSTLESS_READY_SWEEPER_AGE`` (30 s; also from the environment): ``/readyz`` wants a sweeper
  tick within it; 0: no sweeper check (web/health.py).
- ``GHOSTLESS_METRICS_TOKEN`` (else env of that name): the bearer token Prometheus scrapes
  ``/metrics`` with; ``GHOSTLESS_METRICS_PUBLIC`` (else env ``GHOSTLESS_METRICS_PUBLIC=1``):
  serve /metrics to anyone. Without either, only admins may read it (web/metrics.py).
- ``GHOSTLESS_QUOTA`` (else env of that name): every user's submit quota, ghostless.core.quota.WEB_DEFAULT
  unless set (a Quota, a dict / JSON object of its fields over the defaults, or None / ``off``);
  ``GHOSTLESS_QUOTA_CACHE`` (s a user's own limits are cached per process). web/quotas.py.
"""

from __future__ import annotations

import logging
import os
import secrets
from datetime import timedelta

from flask import Flask, request
from flask.sessions import SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix

from ghostless.core.app import AppError

from . import admin, api, auth, deps, errors, health, held, limits, metrics, pages, pool, quotas, sse

log = logging.getLogger("ghostless.web")

DEFAULTS = {
    "MAX_CONTENT_LENGTH": (1 << 20) + (64 << 10),  # 1 MiB of args plus room for the envelope
    "SESSION_COOKIE_NAME": "ghostless_session",
    "SESSION_COOKIE_HTTPONLY": True,
    "SESSION_COOKIE_SAMESITE": "Lax",
    "SESSION_COOKIE_SECURE": os.environ.get("GHOSTLESS_SECURE_COOKIES") == "1",
    "PERMANENT_SESSION_LIFETIME": timedelta(hours=12),
    "GHOSTLESS_SSE_KEEPALIVE": 15.0,
    "GHOSTLESS_SSE_RETRY_MS": 2000,
    "GHOSTLESS_SSE_BUFFER": 1000,
    "GHOSTLESS_BROKER_BLOCK_MS": 5000,
    "GHOSTLESS_LONGPOLL_MAX": 60.0,
    "GHOSTLESS_STUCK_AFTER": 300.0,
    "GHOSTLESS_DASHBOARD_CACHE": 1.0,
    "GHOSTLESS_PROXIES": 0,
    **limits.DEFAULTS,
    **held.DEFAULTS,
    **pool.DEFAULTS,
    **health.DEFAULTS,
}
NUMBERS_FROM_ENV = ("GHOSTLESS_PROXIES", *limits.DEFAULTS, *held.DEFAULTS, *pool.DEFAULTS, *health.DEFAULTS)


def create_app(config: dict | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(DEFAULTS)
    app.config["GHOSTLESS_APP"] = os.environ.get("GHOSTLESS_APP")
    app.config["GHOSTLESS_METRICS_TOKEN"] = os.environ.get("GHOSTLESS_METRICS_TOKEN") or None
    app.config["GHOSTLESS_METRICS_PUBLIC"] = os.environ.get("GHOSTLESS_METRICS_PUBLIC") == "1"
    app.config.update({name: os.environ[name] for name in NUMBERS_FROM_ENV if os.environ.get(name)})
    app.config.update(config or {})
    if app.config.get("GHOSTLESS_ENGINE") is None and not app.config.get("GHOSTLESS_APP"):
        raise AppError("no app: pass GHOSTLESS_ENGINE in the config or set GHOSTLESS_APP=module:engine")
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = os.environ.get("GHOSTLESS_SECRET_KEY") or _random_key()
    for name in NUMBERS_FROM_ENV:
        app.config[name] = _number(name, app.config[name], type(DEFAULTS[name]))
    if hops := app.config["GHOSTLESS_PROXIES"]:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)
    app.session_interface = OneSigner()
    deps.init_app(app)
    held.init_app(app)
    errors.init_app(app)
    quotas.init_app(app)
    app.after_request(_json_headers)
    for blueprint in (auth.bp, api.bp, sse.bp, admin.bp, health.bp, metrics.bp, pages.bp):
        app.register_blueprint(blueprint)
    return app


class OneSigner(SecureCookieSessionInterface):
    """Flask's signed cookie sessions, with the signing serializer made once per set of keys,
    not twice per request (every request opens a session, a bearer one too: a reconnect storm
    opens thousands a second)."""

    def __init__(self):
        self._made: tuple[tuple, object] | None = None

    def get_signing_serializer(self, app: Flask):
        keys = (app.secret_key, tuple(app.config.get("SECRET_KEY_FALLBACKS") or ()))
        made = self._made
        if made is None or made[0] != keys:
            made = self._made = (keys, super().get_signing_serializer(app))
        return made[1]


def _json_headers(response):
    """Nothing under /api (streams and errors included) and no JSON answer is cached or
    content-sniffed, whoever answers it."""
    if request.path.startswith("/api/") or response.mimetype == "application/json":
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def _number(name: str, value: object, kind: type) -> int | float:
    """A numeric setting, >= 0, or AppError naming it (a bad value fails at start, not per request)."""
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = -1
    if not number >= 0:
        raise AppError(f"{name} must be a number >= 0, got {value!r}")
    return number


def close_app(app: Flask) -> None:
    """Stop the app's SSE broker thread (tests; a process that exits needs nothing)."""
    app.extensions["ghostless"].close()


def _random_key() -> str:
    log.warning(
        "no SECRET_KEY or GHOSTLESS_SECRET_KEY: using a random key, so login sessions will "
        "not survive a restart or work across processes"
    )
    return secrets.token_hex(32)
