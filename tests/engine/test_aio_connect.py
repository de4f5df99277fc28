"""AsyncEngine.from_url and connect_async: the redis.asyncio client of every URL form (one Redis, a
Redis Cluster, a primary behind Sentinel), and durable writes (wait_replicas) awaited too."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio
import redis.asyncio.cluster

from ghostless import AsyncEngine, BadRedisURL, Config, State
from ghostless.core.connect import connect_async
from tests.conftest import register_test_types
from tests.support.replicas import replicated_pair

SECRET = "s3cr3t-pw"


def test_each_url_form_gives_its_asyncio_client_with_the_engine_timeouts():
    one = connect_async(f"redis://:{SECRET}@127.0.0.1:1/3")
    kwargs = one.connection_pool.connection_kwargs
    assert isinstance(one, redis.asyncio.Redis)
    assert (kwargs["db"], kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (3, 10.0, 5.0)
    assert SECRET not in repr(one)
    cluster = connect_async("redis+cluster://127.0.0.1:1,127.0.0.1:2?socket_timeout=3")  # connects at first use
    assert isinstance(cluster, redis.asyncio.cluster.RedisCluster)
    assert sorted(n.port for n in cluster.nodes_manager.startup_nodes.values()) == [1, 2]
    primary = connect_async(f"redis+sentinel://:{SECRET}@127.0.0.1:1/mymaster/2?sentinel_password=other-pw")
    pool = primary.connection_pool
    assert isinstance(primary, redis.asyncio.Redis) and pool.service_name == "mymaster"
    assert (pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (2, SECRET)
    assert all(s.connection_pool.connection_kwargs["password"] == "other-pw" for s in pool.sentinel_manager.sentinels)


@pytest.mark.parametrize(
    "url", ["redis+cluster://host-only", "redis+cluster://h:1/3", "redis+sentinel://h:1", f"http://:{SECRET}@h:1"]
)
def test_a_malformed_url_is_the_same_typed_error(url):
    with pytest.raises(BadRedisURL) as caught:
        connect_async(url)
    assert SECRET not in str(caught.value)
    with pytest.raises(BadRedisURL):
        AsyncEngine.from_url(url)


def round_trip(aengine: AsyncEngine) -> tuple:
    """Submit through ``aengine``, run the task on its Engine (a worker), await its result."""
    register_test_types(aengine.engine)
    engine = aengine.engine

    async def body():
        async with aengine:
            task = await aengine.submit("render", {"prompt": "a cat"}, owner="alice")
            waiter = asyncio.create_task(aengine.result(task.id, timeout=20))
            await asyncio.to_thread(lambda: engine.complete(engine.claim(task.id, "w1"), {"url": "cat"}))
            return task, await waiter, await aengine.get(task.id)

    return asyncio.run(body())


def test_from_url_on_a_redis_server(redis_server):
    redis_server.client().flushall()
    task, result, read = round_trip(AsyncEngine.from_url(redis_server.url, namespace="t", dispatcher=None))
    assert result == {"url": "cat"} and read.status == State.SUCCESS and read.id == task.id


def test_from_url_on_a_cluster(redis_cluster):
    redis_cluster.flushall()
    aengine = AsyncEngine.from_url(redis_cluster.url, namespace="t", dispatcher=None)
    assert isinstance(aengine.redis, redis.asyncio.cluster.RedisCluster)
    task, result, read = round_trip(aengine)
    assert result == {"url": "cat"} and read.status == State.SUCCESS and aengine.engine.get(task.id) == read


def test_from_url_through_sentinel(sentinels):
    aengine = AsyncEngine.from_url(sentinels.url, namespace="t", dispatcher=None)
    task, result, read = round_trip(aengine)
    assert result == {"url": "cat"} and read.status == State.SUCCESS
    assert aengine.engine.get(task.id) == read


def test_wait_replicas_holds_each_async_write_until_the_replica_has_it(private_redis):
    primary, replica = replicated_pair(private_redis)
    config = Config(wait_replicas=1, wait_timeout=10.0)
    aengine = AsyncEngine.from_url(primary.url, namespace="t", config=config, dispatcher=None)
    rp, rr = primary.client(), replica.client()
    waits = lambda: int(rp.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))  # noqa: E731
    register_test_types(aengine.engine)

    async def body():
        async with aengine:
            task = await aengine.submit("render", {"prompt": "p"}, owner="alice")
            on_replica = rr.hget(aengine.keys.task(task.id).task, "status")  # read at once: WAIT saw it there
            await aengine.cancel(task.id, by="alice")
            cancelled = rr.hget(aengine.keys.task(task.id).task, "status")
            before = waits()
            await aengine.get(task.id)
            return on_replica, cancelled, waits() - before

    on_replica, cancelled, read_waits = asyncio.run(body())
    assert (on_replica, cancelled) == (b"PENDING", b"CANCELLED")
    assert read_waits == 0, "a read-only call sent WAIT"


def test_an_app_naming_an_async_engine_gives_workers_its_engine(redis_server):
    from ghostless import Engine
    from ghostless.core.app import load_app

    engine = load_app("tests.apps.aio:aengine", redis_url=redis_server.url)
    assert isinstance(engine, Engine) and "render" in engine.registry and engine.keys.ns == "aio"


def test_from_url_shares_the_engine_it_is_given(redis_server):
    from ghostless import Engine

    redis_server.client().flushall()
    engine = Engine(redis_server.client(), namespace="t", dispatcher=None)  # round_trip registers its types
    aengine = AsyncEngine.from_url(redis_server.url, engine=engine)
    assert aengine.engine is engine and aengine.registry is engine.registry and aengine.keys is engine.keys
    with pytest.raises(TypeError, match="namespace"):
        AsyncEngine.from_url(redis_server.url, engine=engine, namespace="other")
    task, result, _read = round_trip(aengine)
    assert result == {"url": "cat"} and engine.get(task.id).status == State.SUCCESS


def test_wait_replicas_is_refused_on_an_async_cluster_client_the_engine_accepts():
    """The Engine waits on each slot owner's connection (cluster.run_then_wait); the AsyncEngine
    cannot yet, so it refuses rather than count another shard's writes."""
    from ghostless import RedisSetupError
    from ghostless.core.scripts import AsyncScripts

    with pytest.raises(RedisSetupError, match="AsyncEngine on Redis Cluster"):
        AsyncScripts(connect_async("redis+cluster://127.0.0.1:1"), Config(wait_replicas=1))
