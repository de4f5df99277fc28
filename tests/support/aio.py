"""The AsyncEngine in sync tests (no pytest-asyncio): a coroutine runs in ``asyncio.run`` on an
AsyncEngine made inside that loop (redis.asyncio clients belong to the loop they connect in)."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio
import redis.asyncio.cluster

from ghostless import AsyncEngine, Engine


def async_client_like(client):
    """A redis.asyncio client (fakeredis.aioredis for a FakeRedis) of ``client``'s server."""
    if type(client).__module__.startswith("fakeredis"):
        import fakeredis.aioredis

        kw = client.connection_pool.connection_kwargs  # a FakeRedis without a server names it by host:port
        return fakeredis.aioredis.FakeRedis(
            server=kw["server"], host=kw["host"], port=kw["port"], version=kw["version"]
        )
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()
        return redis.asyncio.cluster.RedisCluster(host=node.host, port=node.port)
    kw = client.connection_pool.connection_kwargs
    return redis.asyncio.Redis(host=kw["host"], port=kw["port"], db=kw.get("db", 0))


def run_async(engine: Engine, body):
    """``await body(aengine)`` in a new event loop, on an AsyncEngine of ``engine``; its result."""

    async def main():
        async with AsyncEngine(async_client_like(engine.redis), engine) as aengine:
            return await body(aengine)

    return asyncio.run(main())
