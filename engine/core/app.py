"""Finding the user's engine: ``--app module:attribute`` or ``GHOSTLESS_APP``, the way Flask
and Celery name apps."""

from __future__ import annotations

import importlib
import os
import sys

from .aio import AsyncEngine
from .connect import host_name as _host, redact, url_target
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
    if isinstance(obj, AsyncEngine):  # an asyncio app's: its Engine holds the task types
        obj = obj.engine
    if not isinstance(obj, Engine):
        raise AppError(f"{spec} is a {type(obj).__name__}, not a ghostless Engine")
    return obj


def ignored_url(engine: Engine, url: str | None) -> str | None:
    """A warning when ``url`` (``--redis-url`` / GHOSTLESS_REDIS_URL) is not where ``engine``'s
    client connects (the app built its client itself, not with ``Engine.from_url()``); None when it
    is, or when it cannot tell."""
    if not url:
        return None
    where = _target(engine.redis)
    try:
        named = url_target(url)
    except ValueError:
        return None
    if where is None or named is None or _same(where, named):
        return None
    return (
        f"the app's engine connects to {where[1]}, not to the Redis URL given ({redact(url)}): the URL is "
        "ignored (build the engine with Engine.from_url() to follow --redis-url and GHOSTLESS_REDIS_URL)"
    )


def _same(a: tuple[str, str], b: tuple[str, str]) -> bool:
    kind_a, where_a = a
    kind_b, where_b = b
    if kind_a != kind_b:
        return False
    if kind_a == "cluster":  # any startup node of the URL among the client's nodes
        return bool(set(where_a.split(",")) & set(where_b.split(",")))
    return where_a == where_b


def _target(client) -> tuple[str, str] | None:
    """(kind, where) for a client: ("redis", "host:port/db" or "path/db"), ("sentinel", service/db)
    or ("cluster", "host:port,..." of its nodes); None for a client of another kind."""
    from redis.cluster import RedisCluster
    from redis.sentinel import SentinelConnectionPool

    if isinstance(client, RedisCluster):
        return "cluster", ",".join(sorted(f"{_host(n.host)}:{n.port}" for n in client.get_nodes()))
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict) or type(client).__module__.startswith("fakeredis"):
        return None
    db = kwargs.get("db", 0)
    if isinstance(pool, SentinelConnectionPool):
        return "sentinel", f"{pool.service_name}/{db}"
    if kwargs.get("path"):
        return "redis", f"{kwargs['path']}/{db}"
    if "host" not in kwargs:
        return None  # fakeredis and other stand-ins
    return "redis", f"{_host(kwargs['host'])}:{kwargs.get('port', 6379)}/{db}"
