"""The web's bounded Redis (web/pool.py): the app's engine read through a pool of its own that
openers wait on, never more connections than its size, and the user's engine object unchanged."""

from __future__ import annotations

import threading

import pytest
import redis

from ghostless import State
from ghostless.web.pool import BoundedEngine, bounded_engine

from .helpers import task_in


def test_the_web_reads_the_apps_engine_through_a_bounded_waiting_pool_of_its_own(app, engine):
    web = app.extensions["ghostless"].engine
    assert isinstance(web, BoundedEngine) and web.unbounded is engine
    pool = web.redis.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool) and pool.max_connections == 8 and pool.timeout == 30.0
    assert engine.redis.connection_pool is not pool  # the user's client is left as it was
    assert web.scripts.redis is web.redis and web.users.redis is web.redis


def test_the_pool_size_and_wait_come_from_the_config_and_0_serves_the_engine_itself(make_app, engine):
    web = make_app(GHOSTLESS_REDIS_CONNECTIONS=3, GHOSTLESS_REDIS_WAIT=0.5).extensions["ghostless"].engine
    assert (web.redis.connection_pool.max_connections, web.redis.connection_pool.timeout) == (3, 0.5)
    assert make_app(GHOSTLESS_REDIS_CONNECTIONS=0).extensions["ghostless"].engine is engine


def test_the_engines_methods_run_on_the_bounded_client_and_see_what_is_set_on_the_engine(engine, monkeypatch):
    web = bounded_engine(engine, 2, 1.0)
    task = task_in(engine, State.PENDING)
    assert web.redis.connection_pool._connections == []
    assert web.get(task.id).id == task.id  # Engine.get, with self = the bounded engine: on its client
    assert len(web.redis.connection_pool._connections) == 1
    monkeypatch.setattr(engine, "stats", lambda: "patched")  # set on the user's engine: seen here
    assert web.stats() == "patched"
    web.some_setting = 1  # set here: the user's engine's
    assert engine.some_setting == 1
    del web.some_setting
    assert not hasattr(engine, "some_setting")
    assert web.keys is engine.keys and web.registry is engine.registry and web.config is engine.config


def test_many_concurrent_readers_share_the_pools_connections_and_wait_rather_than_fail(redis_server):
    from ghostless import Engine
    from tests.conftest import register_test_types

    client = redis_server.client()
    client.flushall()
    user = register_test_types(Engine(client, namespace="t", dispatcher=None))
    web = bounded_engine(user, 2, 10.0)
    task = task_in(user, State.PENDING)
    errors, start = [], threading.Barrier(50)

    def read():
        start.wait()
        try:
            for _ in range(20):
                assert web.get(task.id).id == task.id
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    pool = web.redis.connection_pool
    assert len(pool._connections) <= 2
    client.close()


def test_a_request_that_cannot_get_a_connection_in_time_gets_a_connection_error(engine):
    web = bounded_engine(engine, 1, 0.05)
    held = web.redis.connection_pool.get_connection()
    try:
        with pytest.raises(redis.ConnectionError):
            web.redis.ping()
    finally:
        web.redis.connection_pool.release(held)
    assert web.redis.ping()
