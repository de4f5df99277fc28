"""Redis URLs (engine/core/connect.py): one Redis, a Redis Cluster, a primary behind Sentinel;
malformed ones are a typed error, and no password reaches a message, a log line or a repr."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.cluster import RedisCluster

from ghostless import BadRedisURL, Engine, State
from ghostless.core.connect import connect, redact
from tests.conftest import register_test_types
from tests.support.wait import wait_until

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    "url, message",
    [
        ("redis+cluster://", "an empty address is not host:port"),
        ("redis+cluster://host-only", "'host-only' is not host:port"),
        (f"redis+cluster://u:{SECRET}@h:notaport", "'h:notaport' is not host:port"),
        ("redis+cluster://h:1,,h:2", "an empty address is not host:port"),
        ("redis+cluster://h:70000", "'h:70000' is not host:port"),
        ("redis+cluster://h:1/3", "a Redis Cluster has database 0 only"),
        (f"redis+cluster://:{SECRET}@h:1?pool=9", "unknown option 'pool'"),
        ("redis+cluster://h:1?socket_timeout=soon", "socket_timeout must be a number of seconds"),
        ("redis+sentinel://h:1", "name the service"),
        (f"redis+sentinel://:{SECRET}@h:1/svc/db0", "database 'db0' is not a number"),
        ("redis+sentinel://h:1/svc?sentinel_password=x&color=red", "unknown option 'color'"),
        (f"redis://:{SECRET}@h:notaport/0", "Port could not be cast"),
        (f"http://:{SECRET}@h:1", "Redis URL must specify one of the schemes"),
        ("localhost:6379", "Redis URL must specify one of the schemes"),
        (f"u:{SECRET}@localhost:6379", "(got ***@localhost:6379)"),
    ],
)
def test_a_malformed_url_is_a_typed_error_that_names_the_fault_and_not_the_password(url, message):
    with pytest.raises(BadRedisURL) as caught:
        connect(url)
    assert isinstance(caught.value, ValueError)  # the CLI turns it into a one-line bad-argument error
    assert message in str(caught.value)
    assert SECRET not in str(caught.value)
    with pytest.raises(BadRedisURL):
        Engine.from_url(url)


def test_redact_hides_every_password_and_keeps_the_rest():
    assert redact(f"redis://user:{SECRET}@h:1/0") == "redis://user:***@h:1/0"
    assert (
        redact(f"redis+cluster://:{SECRET}@a:1,b:2?socket_timeout=2") == "redis+cluster://:***@a:1,b:2?socket_timeout=2"
    )
    assert redact(f"redis+sentinel://a:1/svc/2?sentinel_password={SECRET}") == (
        "redis+sentinel://a:1/svc/2?sentinel_password=***"
    )
    assert redact("redis://h:1/0") == "redis://h:1/0"


def test_one_redis_urls_are_as_before_with_the_engine_timeouts_and_no_password_in_the_repr():
    client = connect(f"redis://:{SECRET}@127.0.0.1:1/3")
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["db"], kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (3, 10.0, 5.0)
    assert SECRET not in repr(client)
    assert isinstance(connect("unix:///tmp/none.sock"), redis.Redis)


def test_a_sentinel_url_names_the_service_the_database_and_both_passwords_kept_out_of_reprs():
    client = connect(f"redis+sentinel://:{SECRET}@127.0.0.1:1,127.0.0.1:2/mymaster/2?sentinel_password=other-pw")
    pool = client.connection_pool
    assert (pool.service_name, pool.connection_kwargs["db"], pool.connection_kwargs["password"]) == (
        "mymaster",
        2,
        SECRET,
    )
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 2]
    assert all(s.connection_pool.connection_kwargs["password"] == "other-pw" for s in sentinels)
    assert SECRET not in repr(client) and "other-pw" not in repr(pool.sentinel_manager)


def test_an_unreachable_cluster_is_a_connection_error_without_the_password(caplog):
    from tests.support.redis_server import free_port

    url = f"redis+cluster://:{SECRET}@127.0.0.1:{free_port()}?socket_connect_timeout=0.5"
    with caplog.at_level(logging.DEBUG), pytest.raises(redis.ConnectionError) as caught:
        connect(url)
    assert "cannot reach the Redis Cluster at redis+cluster://:***@127.0.0.1:" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in caplog.text


def test_a_cluster_url_gives_an_engine_on_every_startup_node(redis_cluster, monkeypatch):
    redis_cluster.flushall()
    url = redis_cluster.url + "?socket_timeout=3"
    monkeypatch.setenv("GHOSTLESS_REDIS_URL", url)
    engine = register_test_types(Engine.from_url(namespace="t", dispatcher=None))
    assert isinstance(engine.redis, RedisCluster)
    ports = {p for _, p in redis_cluster.startup_nodes}
    assert {n.port for n in engine.redis.nodes_manager.startup_nodes.values()} <= ports
    masters = engine.redis.get_primaries()
    assert len(masters) == 3 and {n.port for n in masters} <= ports
    assert masters[0].redis_connection.connection_pool.connection_kwargs["socket_timeout"] == 3.0
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    assert engine.complete(engine.claim(task.id, "w1"), None) == State.SUCCESS
    assert SECRET not in repr(engine.redis)


def test_through_sentinel_the_engine_carries_on_after_the_primary_is_killed(sentinels):
    """SIGKILL the primary: Sentinel promotes the replica, and the same engine (redis-py's
    Sentinel client asks the sentinels again after a connection error) submits and claims there."""
    engine = register_test_types(Engine.from_url(sentinels.url, namespace="t", dispatcher=None))
    before = engine.submit("render", {"prompt": "before"}, owner="alice")
    assert engine.redis.wait(1, 5000) == 1  # the replica has it before the kill
    old = sentinels.master_address()
    sentinels.kill_primary()
    new = sentinels.wait_failover(old[1])
    assert new != old

    def submits():
        try:
            return engine.submit("render", {"prompt": "after"}, owner="alice")
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
            return None

    after = wait_until(submits, timeout=30, what="a submit through Sentinel after the failover")
    kw = engine.redis.connection_pool.get_master_address()
    assert kw == new
    assert engine.complete(engine.claim(after.id, "w1"), {"ok": 1}) == State.SUCCESS
    assert engine.get(before.id).status == State.PENDING
    assert engine.check() == []


def test_the_suite_never_falls_back_to_the_machines_shared_redis(monkeypatch):
    """tests/conftest.py points the default URL at a closed port for every test in this process."""
    from ghostless.core.connect import connect

    monkeypatch.delenv("GHOSTLESS_REDIS_URL", raising=False)
    kwargs = connect().connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"]) == ("127.0.0.1", 1)
