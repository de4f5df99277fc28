"""The web process's Redis: a small bounded pool that openers wait on, never one per request.

A burst of thousands of stream openers (every browser reconnecting after a restart) would
otherwise take one pooled connection each at once: redis-py's default pool refuses past its
size ("Too many connections", answered as 503s) and an unbounded one opens a connection per
opener. The web instead serves the app's engine through a client on a
``BlockingConnectionPool`` of ``GHOSTLESS_REDIS_CONNECTIONS`` connections (8): a request waits
up to ``GHOSTLESS_REDIS_WAIT`` seconds (30) for one, then gets ``redis.ConnectionError`` (a
stream opener answers it with an EventSource retry, web/sse.py). 0 connections: the app's
engine as it is.

The app's engine may be the user's own object (``Engine.from_url`` in their module), so it is
not changed: ``BoundedEngine`` reads it through its own client. The broker's reader has a
client of its own too (``own_client``), so a web process holds at most the pool's size plus
the reader's one connection (and whatever the app's dispatcher opens for submits).
"""

from __future__ import annotations

import redis as redis_lib

from ghostless.core.scripts import Scripts
from ghostless.core.users import Users

DEFAULTS = {"GHOSTLESS_REDIS_CONNECTIONS": 8, "GHOSTLESS_REDIS_WAIT": 30.0}


def client_like(client, pool_class=None, socket_timeout: float | None = None, **pool_kwargs):
    """A client on the same server, with the same connection settings as ``client`` (but
    ``socket_timeout`` when given), on a pool of its own: ``pool_class`` (default: the class of
    ``client``'s) made with ``pool_kwargs``."""
    pool = client.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if not k.startswith(("maint_notifications", "orig_"))}
    if socket_timeout is not None:
        kwargs["socket_timeout"] = socket_timeout
    new_pool = (pool_class or pool.__class__)(connection_class=pool.connection_class, **pool_kwargs, **kwargs)
    return type(client)(connection_pool=new_pool)


def own_client(client, socket_timeout: float):
    """A client with at most two connections of its own, reads blocking up to ``socket_timeout``."""
    timeout = max(client.connection_pool.connection_kwargs.get("socket_timeout") or 0, socket_timeout)
    return client_like(client, max_connections=2, socket_timeout=timeout)


def bounded_engine(engine, connections: int, wait: float):
    """``engine`` read through a client of at most ``connections`` connections, each request
    waiting up to ``wait`` seconds for one; ``engine`` itself with 0 connections."""
    if not connections:
        return engine
    client = client_like(
        engine.redis, redis_lib.BlockingConnectionPool, max_connections=int(connections), timeout=float(wait)
    )
    # The app's own client has an idle connection or two from building the engine (its server
    # checks): closed, as the web reads through its own from now on (the client reconnects if
    # it is used again: the dispatcher's submits, the data epoch).
    engine.redis.connection_pool.disconnect(inuse_connections=False)
    return BoundedEngine(engine, client)


class BoundedEngine:
    """The app's engine with another Redis client: its own ``redis``, ``scripts`` and ``users``
    on that client; everything else (keys, config, registry, dispatcher, caches, and anything
    set on the engine later, such as a test's monkeypatch) is the engine's own, and its methods
    run with this object as ``self``, so they use the client here. Attributes set or deleted
    here are the engine's, except those three."""

    _OWN = ("redis", "scripts", "users")

    def __init__(self, engine, client):
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "redis", client)
        object.__setattr__(self, "scripts", Scripts(client, engine.config, on_resolve=engine.scripts.on_resolve))
        object.__setattr__(self, "users", Users(client, engine.keys))

    def __getattr__(self, name: str):
        engine = object.__getattribute__(self, "_engine")
        own = vars(engine)
        if name in own:
            return own[name]
        attr = getattr(type(engine), name)
        return attr.__get__(self, type(engine)) if hasattr(attr, "__get__") else attr

    def __setattr__(self, name: str, value) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._engine, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._OWN:
            object.__delattr__(self, name)
        else:
            delattr(self._engine, name)

    @property
    def unbounded(self):
        """The app's engine itself."""
        return self._engine

    def __repr__(self) -> str:
        return f"<BoundedEngine of {self._engine!r}>"
