"""Copies of a client (engine/core/clients.py) on one Redis, through Sentinel and on a Redis
Cluster: the heartbeat client's timeouts are a third of the lease there too (its settings, and a
heartbeat to a hung primary failing that soon), the web's bounded copy waits for a free connection
and then fails without "Too many connections", and RQ's connection is a client of its own.

(Before, a copy of a cluster or Sentinel client was the client itself: heartbeats there waited
out the engine client's 10 s timeout and its resends, and RQ shared the engine's connections.)
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager

import fakeredis
import pytest
import redis
from redis.exceptions import MaxConnectionsError
from redis.sentinel import SentinelConnectionPool

from ghostless import Engine
from ghostless.core.clients import WaitingPool, WaitingSentinelPool, client_like
from ghostless.execution.worker import rq_connection

LEASE = 0.9  # s: heartbeats time out after 0.3 s, well under the 1 s a cluster or Sentinel waits to fail a node over


def node_pools(client):
    return [n.redis_connection.connection_pool for n in client.get_nodes() if n.redis_connection]


@contextmanager
def stopped(proc):
    """The redis-server ``proc`` hung (SIGSTOP) for the block: its connections stay open and silent."""
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def held_engine(client):
    engine = Engine(client, namespace="t", dispatcher=None)
    engine.task(name="beat", queue="beats", lease=LEASE)(lambda ctx: None)
    lease = engine.claim(engine.submit("beat", {}, owner="alice").id, "w1")
    engine.heartbeat(lease)  # the heartbeat client is made, and connected
    return engine, lease


def fails_within(call, seconds: float) -> BaseException:
    start = time.monotonic()
    with pytest.raises((redis.TimeoutError, redis.ConnectionError)) as caught:
        call()
    assert time.monotonic() - start < seconds, f"failed after {time.monotonic() - start:.2f}s"
    return caught.value


# -- one Redis ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make", [fakeredis.FakeRedis, lambda: redis.BlockingConnectionPool(host="127.0.0.1", port=1, timeout=3)]
)
def test_a_copy_of_one_redis_has_its_own_pool_of_the_same_kind_and_the_overrides(make):
    made = make()
    client = made if isinstance(made, redis.Redis) else redis.Redis(connection_pool=made)
    copy = client_like(client, socket_timeout=0.5)
    pool, original = copy.connection_pool, client.connection_pool
    assert pool is not original and type(pool) is type(original) and pool.connection_class is original.connection_class
    assert pool.connection_kwargs["socket_timeout"] == 0.5
    assert getattr(pool, "timeout", None) == getattr(original, "timeout", None)
    assert type(copy) is type(client)


def test_a_waiting_copy_of_one_redis_fails_with_max_connections_after_its_wait(redis_server):
    copy = client_like(redis_server.client(), max_connections=1, wait=0.1)
    assert isinstance(copy.connection_pool, WaitingPool) and copy.connection_pool.max_connections == 1
    held = copy.connection_pool.get_connection()
    try:
        with pytest.raises(MaxConnectionsError):
            copy.ping()
    finally:
        copy.connection_pool.release(held)
    assert copy.ping()


def test_a_client_on_a_pool_of_another_kind_is_refused_not_shared():
    class Odd:
        connection_pool = object()

    with pytest.raises(TypeError, match="cannot copy"):
        client_like(Odd())


# -- Sentinel -----------------------------------------------------------------------------------------
def test_through_sentinel_the_heartbeat_client_is_a_pool_of_its_own_for_the_service_with_the_short_timeout(
    sentinels,
):
    engine, lease = held_engine(Engine.from_url(sentinels.url, namespace="t", dispatcher=None).redis)
    via = engine._heartbeat_clients[LEASE]
    pool, original = via.connection_pool, engine.redis.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool is not original
    assert (pool.service_name, pool.sentinel_manager, pool.is_master) == ("ghostless", original.sentinel_manager, True)
    assert pool.connection_kwargs["socket_timeout"] == LEASE / 3
    assert original.connection_kwargs["socket_timeout"] == 10.0  # the engine's own is left as it was
    with stopped(sentinels.primary.proc):
        fails_within(lambda: engine.heartbeat(lease), LEASE)  # its 0.3 s timeout, within the lease (not 10 s)
    assert engine.heartbeat(lease) > 0


def test_through_sentinel_a_waiting_copy_waits_fails_without_too_many_connections_and_follows_a_failover(sentinels):
    client = Engine.from_url(sentinels.url, namespace="t", dispatcher=None).redis
    copy = client_like(client, max_connections=1, wait=0.1)
    assert isinstance(copy.connection_pool, WaitingSentinelPool)
    copy.set("k", "before")
    held = copy.connection_pool.get_connection()
    try:
        with pytest.raises(MaxConnectionsError):
            copy.get("k")
    finally:
        copy.connection_pool.release(held)
    client.execute_command("WAIT", 1, 5000)  # the replica has the key
    old = sentinels.master_address()
    sentinels.kill_primary()
    new = sentinels.wait_failover(old[1])
    deadline = time.monotonic() + 10
    while True:  # a connection error or two while the copy's pool learns the new primary
        try:
            assert copy.get("k") == b"before"
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "the copy never reached the new primary"
    assert copy.connection_pool.get_master_address() == new


def test_through_sentinel_rq_gets_a_connection_of_its_own(sentinels):
    client = Engine.from_url(sentinels.url, namespace="t", dispatcher=None).redis
    rq = rq_connection(client, "t")
    assert rq is not client and rq.connection_pool is not client.connection_pool
    assert isinstance(rq.connection_pool, SentinelConnectionPool) and rq.ping()


# -- Redis Cluster ------------------------------------------------------------------------------------
@pytest.fixture
def cluster(redis_cluster):
    redis_cluster.flushall()
    return redis_cluster


def test_on_a_cluster_the_heartbeat_client_is_a_cluster_client_of_its_own_with_the_short_timeout(cluster):
    engine, lease = held_engine(Engine.from_url(cluster.url, namespace="t", dispatcher=None).redis)
    via = engine._heartbeat_clients[LEASE]
    assert via is not engine.redis and via.retry.get_retries() == 0  # sent once
    assert {p.connection_kwargs["socket_timeout"] for p in node_pools(via)} == {LEASE / 3}
    assert {p.connection_kwargs["socket_timeout"] for p in node_pools(engine.redis)} == {10.0}
    assert not {id(p) for p in node_pools(via)} & {id(p) for p in node_pools(engine.redis)}
    shard = cluster.node_for_key(engine.keys.task(lease.task_id).task)
    with stopped(shard.proc):
        fails_within(lambda: engine.heartbeat(lease), LEASE)  # its 0.3 s timeout, within the lease (not 10 s)
    cluster.wait_ok()
    assert engine.heartbeat(lease) > 0


def test_on_a_cluster_a_waiting_copy_has_a_waiting_pool_per_node_and_fails_without_too_many_connections(cluster):
    client = Engine.from_url(cluster.url, namespace="t", dispatcher=None).redis
    copy = client_like(client, max_connections=2, wait=0.1)
    pools = node_pools(copy)
    assert len(pools) >= 3 and all(isinstance(p, WaitingPool) for p in pools)
    assert {(p.max_connections, p.timeout, p.connection_kwargs["socket_timeout"]) for p in pools} == {(2, 0.1, 10.0)}
    copy.set("{q}k", "v")
    pool = copy.get_node_from_key("{q}k").redis_connection.connection_pool
    held = [pool.get_connection(), pool.get_connection()]
    try:
        with pytest.raises(MaxConnectionsError):
            copy.get("{q}k")
    finally:
        for connection in held:
            pool.release(connection)
    assert copy.get("{q}k") == b"v"
    assert copy.get_node_from_key("{q}k").redis_connection.connection_pool is pool  # no topology refresh


def test_on_a_cluster_rq_gets_a_cluster_client_of_its_own_that_never_resends(cluster):
    client = Engine.from_url(cluster.url, namespace="t", dispatcher=None).redis
    rq = rq_connection(client, "t")
    inner = rq.__wrapped__
    assert inner is not client and inner.retry.get_retries() == 0 and rq.ping()
    probe = client_like(rq, socket_timeout=1.0)  # the worker's probe, made from RQ's connection
    assert {p.connection_kwargs["socket_timeout"] for p in node_pools(probe)} == {1.0}


def test_a_worker_rides_out_a_cluster_it_cannot_yet_copy_a_probe_client_from(monkeypatch):
    # On a cluster, a copy asks a node for the slot map: while the cluster is down, making the
    # worker's probe fails like a call, and is tried again (it used to end the worker).
    from ghostless.execution import outage

    class Base:
        name, _stop_requested = "w1", False

        def heartbeat(self, timeout=None, pipeline=None):
            pass

    class Worker(outage.RidesOutRedis, Base):
        connection = object()

        def _register_again(self):
            pass

    made = []

    def short_client(client, timeout):
        made.append(client)
        if len(made) == 1:
            raise redis.ConnectionError("cannot reach the Redis Cluster")
        return fakeredis.FakeRedis()

    monkeypatch.setattr(outage, "short_client", short_client)
    worker = Worker()
    worker._wait_for_redis()
    assert len(made) == 2 and worker._probe is not None
