"""tests.apps.basic's task types on an engine over a Redis Cluster, for worker and sweeper
processes (``--app tests.worker.cluster_app:engine``), plus ``relay`` and ``post`` on queues of
other shards than basic's ``work`` (under the 3-master slot split of tests/support/cluster.py).

GHOSTLESS_REDIS_URL is ``redis+cluster://host:port[,host:port...]`` (tests/support/cluster.py);
the client is built here, ``Engine(RedisCluster(...))``.
"""

from __future__ import annotations

import os

from redis.cluster import ClusterNode, RedisCluster

from ghostless import Engine
from tests.apps import basic

MAIL, OTHER = "mail", "other"  # slots 4247 and 11361 (shards 0 and 2); basic's "work": 6132 (shard 1)
_engine: Engine | None = None


def __getattr__(name: str):
    if name == "engine":
        return app_engine()
    raise AttributeError(name)


def cluster_client(url: str) -> RedisCluster:
    scheme = "redis+cluster://"
    if not url.startswith(scheme):
        raise ValueError(f"not a cluster URL: {url!r}")
    nodes = [
        ClusterNode(host, int(port)) for host, _, port in (a.rpartition(":") for a in url[len(scheme) :].split(","))
    ]
    return RedisCluster(startup_nodes=nodes, socket_timeout=10, socket_connect_timeout=5)


def register(engine: Engine, lease: float = basic.LEASE) -> Engine:
    basic.register(engine, lease=lease)

    def relay(ctx, tag=""):
        basic.note(ctx, "start")
        return {"queue": MAIL, "tag": tag, "pid": os.getpid()}

    def post(ctx, tag=""):
        basic.note(ctx, "start")
        return {"queue": OTHER, "tag": tag, "pid": os.getpid()}

    engine.task(queue=MAIL, lease=lease, timeout=60)(relay)
    engine.task(queue=OTHER, lease=lease, timeout=60)(post)
    return engine


def app_engine() -> Engine:
    global _engine
    if _engine is None:
        client = cluster_client(os.environ["GHOSTLESS_REDIS_URL"])
        _engine = register(Engine(client, namespace=os.environ.get("GHOSTLESS_TEST_NS", "gl"), config=basic.config()))
        basic._engine = _engine  # basic's task functions write their side-effect log through it
    return _engine
