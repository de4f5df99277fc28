"""Copies of a Redis client: the same server(s) and settings, a pool of its own, some settings changed.

``client_like(client, ...)`` is the one way the engine, its workers and the web make such a copy
(heartbeats with timeouts bounded by the lease, RQ's connection, the web's bounded pool, the SSE
reader). It copies every kind of client the core is given:

- ``redis.Redis`` on a ``ConnectionPool`` or ``BlockingConnectionPool`` (fakeredis too): a new pool
  of the same class, connection class and connection settings;
- a Sentinel-managed client (``SentinelConnectionPool``, ``Sentinel.master_for``): a new pool for
  the same service through the same Sentinel manager, so the copy follows a failover as the
  original does (it asks the sentinels again after a connection error);
- ``RedisCluster``: a new cluster client on the current nodes (and the startup nodes), with the
  connection settings its nodes' connections have and its cluster options; each node gets a pool
  of its own. ``max_connections`` and ``wait`` are then per node.

``wait`` (seconds) makes the copy's pools wait that long for a free connection (a bounded pool
that requests queue on) and then raise ``redis.exceptions.MaxConnectionsError``, a
``redis.ConnectionError``: never "Too many connections" at once, and on a cluster not taken for a
failed node (redis-py's cluster client neither resends it nor refreshes its slot map for it, as it
does for a broken connection).
"""

from __future__ import annotations

from queue import Empty

import redis
from redis.backoff import NoBackoff
from redis.cluster import REDIS_ALLOWED_KEYS, ClusterNode, RedisCluster
from redis.exceptions import MaxConnectionsError, RedisClusterException
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

# Connection settings a pool adds to its own, not the caller's: left to the copy's pool to make.
_POOL_OWN = ("connection_pool", "himport_registry", "maint_notifications", "orig_")
# Per-node or per-client keys a copied cluster's nodes get from the cluster client itself.
_NODE_OWN = ("host", "port", "retry", "db", "redis_connect_func", "connection_pool", "max_connections", "timeout")


class WaitingPool(redis.BlockingConnectionPool):
    """A BlockingConnectionPool whose wait for a free connection, when it runs out, raises
    MaxConnectionsError (a ConnectionError) rather than a plain ConnectionError."""

    def get_connection(self, *args, **kwargs):
        try:
            return super().get_connection(*args, **kwargs)
        except redis.ConnectionError as e:
            if isinstance(e.__context__, Empty):  # the wait ran out: no connection was tried
                raise MaxConnectionsError(f"no free connection within {self.timeout}s") from None
            raise


class WaitingSentinelPool(SentinelConnectionPool, WaitingPool):
    """A Sentinel-managed pool that waits for a free connection as WaitingPool does."""


def no_resends() -> dict:
    """Connection settings under which redis-py sends a command once (no retry on any error)."""
    return {"retry": Retry(NoBackoff(), 0), "retry_on_error": [], "retry_on_timeout": False}


def client_like(client, max_connections: int | None = None, wait: float | None = None, **settings):
    """A client of its own (own pools) on the same server(s), with the settings of ``client`` but
    ``settings`` (connection settings: ``socket_timeout``, ``socket_connect_timeout``, ``retry``,
    ...), at most ``max_connections`` connections (default: as ``client``'s pool) and, with
    ``wait``, waiting up to ``wait`` seconds for a free one. An RQ connection wrapping a client
    (``__wrapped__``) is copied as the client it wraps.

    Raises TypeError for a client on a pool of another kind (nothing to copy it from)."""
    client = getattr(client, "__wrapped__", client)
    if isinstance(client, RedisCluster):
        return _cluster_like(client, max_connections, wait, settings)
    pool = getattr(client, "connection_pool", None)
    if not isinstance(pool, redis.ConnectionPool):
        raise TypeError(f"cannot copy a Redis client on {pool!r}")
    kwargs = {**_settings(pool.connection_kwargs), **settings}
    kwargs["max_connections"] = max_connections or pool.max_connections
    if wait is not None or isinstance(pool, redis.BlockingConnectionPool):
        kwargs["timeout"] = wait if wait is not None else getattr(pool, "timeout", None)
    new: redis.ConnectionPool
    if isinstance(pool, SentinelConnectionPool):
        sentinel_pool = WaitingSentinelPool if wait is not None else type(pool)
        kwargs.update(is_master=pool.is_master, check_connection=pool.check_connection)
        new = sentinel_pool(pool.service_name, pool.sentinel_manager, connection_class=pool.connection_class, **kwargs)
    else:
        plain_pool = WaitingPool if wait is not None else type(pool)
        new = plain_pool(connection_class=pool.connection_class, **kwargs)
    return type(client).from_pool(new)


def short_client(client, timeout: float):
    """``client_like`` with socket timeouts of ``timeout`` seconds and no resends: a call to a Redis
    that hangs or is cut off fails within ``timeout``."""
    return client_like(client, socket_timeout=timeout, socket_connect_timeout=timeout, **no_resends())


WAIT_MARGIN = 0.25  # seconds a WAIT's answer may take beyond its own timeout


def heartbeat_client(client, lease: float, wait: float = 0.0):
    """The client heartbeats of a ``lease``-second lease go on: a heartbeat fails within a third
    of the lease instead of after the engine client's timeout and resends (~10 s, whatever the
    lease), so the holder learns within the lease that it can no longer renew it. ``wait``: the
    longest a heartbeat's WAIT may block (``Config.wait_timeout`` with ``wait_replicas``), plus a
    margin, when that is longer: the WAIT answers (ReplicationTimeout) rather than being cut off."""
    return short_client(client, max(lease / 3, wait + WAIT_MARGIN if wait else 0.0, 0.01))


def _settings(connection_kwargs: dict) -> dict:
    return {k: v for k, v in connection_kwargs.items() if not k.startswith(_POOL_OWN)}


def _cluster_like(client: RedisCluster, max_connections: int | None, wait: float | None, settings: dict):
    manager = client.nodes_manager
    node_pool = next(n.redis_connection for n in client.get_nodes() if n.redis_connection).connection_pool
    kwargs = {k: v for k, v in node_pool.connection_kwargs.items() if k in REDIS_ALLOWED_KEYS and k not in _NODE_OWN}
    kwargs.pop("maint_notifications_config", None)  # the cluster client's own, below
    kwargs.update(settings, connection_class=node_pool.connection_class)
    retry = kwargs.pop("retry", client.retry)  # resends are the cluster client's; its nodes never resend
    kwargs.pop("retry_on_error", None)  # not a cluster setting (its nodes have none)
    pool_class = WaitingPool if wait is not None else manager.connection_pool_class
    kwargs["max_connections"] = max_connections or node_pool.max_connections
    if issubclass(pool_class, redis.BlockingConnectionPool):
        kwargs["timeout"] = wait if wait is not None else getattr(node_pool, "timeout", None)
    if client.user_on_connect_func is not None:
        kwargs["redis_connect_func"] = client.user_on_connect_func
    if client.read_from_replicas:  # deprecated in redis-py (a warning): passed only when set
        kwargs["read_from_replicas"] = True
    nodes = {n.name: n for n in [*client.get_nodes(), *manager.startup_nodes.values()]}
    first, *rest = nodes.values()
    host = f"[{first.host}]" if ":" in first.host else first.host
    try:  # it asks a node for the slot map at once
        return RedisCluster(
            # A URL makes redis-py build each node's pool as connection_pool_class(**settings) (its
            # from_url path), the only way it takes a pool class; the other nodes are startup nodes.
            url=f"redis://{host}:{first.port}",
            startup_nodes=[ClusterNode(n.host, n.port) for n in rest],
            connection_pool_class=pool_class,
            retry=retry,
            require_full_coverage=manager._require_full_coverage,
            dynamic_startup_nodes=manager._dynamic_startup_nodes,
            address_remap=manager.address_remap,
            reinitialize_steps=client.reinitialize_steps,
            load_balancing_strategy=client.load_balancing_strategy,
            maint_notifications_config=client.maint_notifications_config,
            **kwargs,
        )
    except RedisClusterException as e:  # not a RedisError: give callers the error they handle
        raise redis.ConnectionError(f"cannot reach the Redis Cluster: {e}") from None
