"""The web process's Redis: a small bounded pool that openers wait on, never one per request.

A burst of thousands of stream openers (every browser reconnecting after a restart) would
otherwise take one pooled connection each at once: redis-py's default pool refuses past its
size ("Too many connections", answered as 503s) and an unbounded one opens a connection per
opener. The web instead serves the app's engine through a copy of its client
(``ghostless.core.clients.client_like``: one Redis, Sentinel or a cluster) on waiting pools of
``GHOSTLESS_REDIS_CONNECTIONS`` connections (8; on a cluster, per node): a request waits up to
``GHOSTLESS_REDIS_WAIT`` seconds (30) for one, then gets ``redis.ConnectionError`` (a
``MaxConnectionsError``; a stream opener answers it with an EventSource retry, web/sse.py).
0 connections: the app's engine as it is. Its reads of a token's user, a session and a task's
snapshot go through coalescers (web/coalesce.py; one for credentials, one for snapshots): every
such read of the moment in one pipeline, at most ``GHOSTLESS_REDIS_BATCH`` (200) a time; not on
a Redis Cluster, where one unreachable shard would fail the whole pipeline.

The app's engine may be the user's own object (``Engine.from_url`` in their module), so it is
not changed: ``BoundedEngine`` reads it through its own client. The broker's reader has a
client of its own too (``own_client``), so a web process holds at most the pool's size plus
the reader's one connection (and whatever the app's dispatcher opens for submits).
"""

from __future__ import annotations

from ghostless.core.clients import client_like
from ghostless.core.cluster import is_cluster
from ghostless.core.scripts import Scripts
from ghostless.core.users import Users

from .coalesce import CoalescedScripts

DEFAULTS = {"GHOSTLESS_REDIS_CONNECTIONS": 8, "GHOSTLESS_REDIS_WAIT": 30.0, "GHOSTLESS_REDIS_BATCH": 200}


def own_client(client, socket_timeout: float):
    """A client with at most two connections of its own (on a cluster: per node), reads blocking
    up to ``socket_timeout`` (or the client's own timeout, when longer)."""
    timeout = max(_socket_timeout(client) or 0, socket_timeout)
    return client_like(client, max_connections=2, socket_timeout=timeout)


def bounded_engine(engine, connections: int, wait: float, batch: int = DEFAULTS["GHOSTLESS_REDIS_BATCH"]):
    """``engine`` read through a client of at most ``connections`` connections (on a cluster: per
    node), each request waiting up to ``wait`` seconds for one, its reads of a token's user and
    a task's snapshot sent together, up to ``batch`` in a pipeline (0: one by one); ``engine``
    itself with 0 connections."""
    if not connections:
        return engine
    client = client_like(engine.redis, max_connections=int(connections), wait=float(wait))
    # The app's own client has an idle connection or two from building the engine (its server
    # checks): closed, as the web reads through its own from now on (the client reconnects if
    # it is used again: the dispatcher's submits, the data epoch).
    for pool in _pools(engine.redis):
        pool.disconnect(inuse_connections=False)
    # Not on a cluster: its pipeline fails whole when one shard is unreachable, and would fail
    # the reads of every healthy shard with it until the failover.
    on_resolve = engine.scripts.on_resolve
    if int(batch) > 0 and not is_cluster(client):
        timeout = float(wait) + (_socket_timeout(client) or 10.0)
        scripts = CoalescedScripts(client, engine.config, timeout, int(batch), on_resolve=on_resolve)
    else:
        scripts = Scripts(client, engine.config, on_resolve=on_resolve)
    return BoundedEngine(engine, client, scripts)


def _pools(client) -> list:
    """The connection pools of ``client``: its one pool, or one per cluster node."""
    if is_cluster(client):
        return [n.redis_connection.connection_pool for n in client.get_nodes() if n.redis_connection]
    return [client.connection_pool]


def _socket_timeout(client) -> float | None:
    pools = _pools(client)
    return pools[0].connection_kwargs.get("socket_timeout") if pools else None


class BoundedEngine:
    """The app's engine with another Redis client: its own ``redis``, ``scripts`` and ``users``
    on that client; everything else (keys, config, registry, dispatcher, caches, and anything
    set on the engine later, such as a test's monkeypatch) is the engine's own, and its methods
    run with this object as ``self``, so they use the client here. Attributes set or deleted
    here are the engine's, except those three."""

    _OWN = ("redis", "scripts", "users")

    def __init__(self, engine, client, scripts: Scripts | None = None):
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "redis", client)
        scripts = scripts or Scripts(client, engine.config, on_resolve=engine.scripts.on_resolve)
        object.__setattr__(self, "scripts", scripts)
        object.__setattr__(self, "users", Users(client, engine.keys, scripts))

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
