"""The engine's contract tests run on three backends: fakeredis, a real redis-server and a real
Redis Cluster (3 masters + 3 replicas). Tests that a cluster cannot serve are marked
``standalone_only`` with the reason; they skip on the cluster param."""

from __future__ import annotations

import fakeredis
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "standalone_only(reason): the test cannot run on a Redis Cluster")


@pytest.fixture(scope="session")
def cluster_client(redis_cluster):
    """One cluster client for the session (it learns the slot map once, not per test)."""
    client = redis_cluster.client()
    yield client
    client.close()


@pytest.fixture(params=["fake", "real", "cluster"])
def redis_client(request):
    if request.param == "cluster":
        marker = request.node.get_closest_marker("standalone_only")
        if marker:
            pytest.skip("not on a cluster: " + (marker.args[0] if marker.args else marker.kwargs.get("reason", "")))
        client = request.getfixturevalue("cluster_client")
        client.flushall()
        yield client
        return
    if request.param == "real":
        client = request.getfixturevalue("redis_server").client()
    else:
        client = fakeredis.FakeRedis()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def executor():
    """An in-memory executor (tests.support.fakes.FakeDispatcher)."""
    from tests.support.fakes import FakeDispatcher

    return FakeDispatcher()


@pytest.fixture
def dispatching(engine, executor):
    """The test engine with ``executor`` attached."""
    from tests.support.snapshots import sibling

    return sibling(engine, dispatcher=executor)
