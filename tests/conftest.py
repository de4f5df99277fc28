"""Backends for every contract test: fakeredis (with lupa) and a private real redis-server.

Real Redis tests skip loudly when ``redis-server`` is missing, and fail instead
when REQUIRE_REAL_REDIS=1 (as in CI).
"""

from __future__ import annotations

import os

import fakeredis
import pytest

from ghostless import Backoff, Engine
from ghostless.core import connect as connect_mod
from tests.support.cluster import Cluster, Sentinels, redis_cli_path
from tests.support.redis_server import RedisServer, redis_server_path

REQUIRE_REAL = os.environ.get("REQUIRE_REAL_REDIS") == "1"

# The machine's shared Redis (127.0.0.1:6379) is never a target: a command run in-process without
# a URL (GHOSTLESS_REDIS_URL unset) gets a closed loopback port instead of the default, so it fails
# to connect rather than touching it. Processes the tests start always get a private URL.
connect_mod.DEFAULT_URL = "redis://127.0.0.1:1/0"


@pytest.fixture(autouse=True)
def _ghostless_environment():
    """Every test starts and ends with the process's GHOSTLESS_* environment as it was: commands
    run in-process (``ghostless worker --redis-url ...`` passes its URL to the work horse through
    the environment) must not hand one test's settings to the next."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("GHOSTLESS_")}
    yield
    for k in [k for k in os.environ if k.startswith("GHOSTLESS_") and k not in saved]:
        del os.environ[k]
    os.environ.update(saved)


def need_redis_server() -> None:
    if redis_server_path() is None:
        msg = "redis-server is not installed: real-Redis tests cannot run (apt-get install redis-server)"
        if REQUIRE_REAL:
            pytest.fail(msg + " and REQUIRE_REAL_REDIS=1")
        pytest.skip("SKIPPED LOUDLY: " + msg)


def need_redis_cli() -> None:
    need_redis_server()
    if redis_cli_path() is None:
        msg = "redis-cli is not installed: Redis Cluster tests cannot run (apt-get install redis-tools)"
        if REQUIRE_REAL:
            pytest.fail(msg + " and REQUIRE_REAL_REDIS=1")
        pytest.skip("SKIPPED LOUDLY: " + msg)


@pytest.fixture(scope="session")
def redis_cluster():
    """One private Redis Cluster (3 masters + 3 replicas) for the session; tests flush it.
    Tests that kill nodes make their own with ``private_cluster``."""
    need_redis_cli()
    cluster = Cluster().start()
    yield cluster
    cluster.close()


@pytest.fixture
def private_cluster():
    """A Redis Cluster owned by one test (its nodes killed and removed afterwards)."""
    need_redis_cli()
    cluster = Cluster().start()
    yield cluster
    cluster.close()


@pytest.fixture
def sentinels():
    """A primary, a replica and three sentinels owned by one test (service name ``ghostless``)."""
    need_redis_server()
    setup = Sentinels().start()
    yield setup
    setup.close()


@pytest.fixture(scope="session")
def redis_server():
    """One private redis-server for the session; tests flush it. Tests that kill or
    reconfigure Redis make their own with ``private_redis``."""
    need_redis_server()
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def private_redis():
    """Factory of redis-servers owned by one test (killed and removed afterwards)."""
    need_redis_server()
    made = []

    def make(*extra, **kw) -> RedisServer:
        server = RedisServer(*extra, **kw).start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


@pytest.fixture(params=["fake", "real"])
def redis_client(request):
    if request.param == "fake":
        client = fakeredis.FakeRedis()
    else:
        client = request.getfixturevalue("redis_server").client()
    client.flushall()
    yield client
    client.close()


def register_test_types(engine: Engine) -> Engine:
    """Task types the contract tests share (short leases: timing tests wait on Redis time)."""

    @engine.task(
        name="render",
        queue="images",
        lease=30,
        timeout=600,
        max_attempts=3,
        backoff=Backoff.fixed([0.05, 0.1]),
        stages={"generating": 300, "uploading": 0},
        permanent_errors=("bad_prompt",),
    )
    def render(ctx, prompt="", **extra):  # pragma: no cover - executed by workers, not here
        return {"prompt": prompt}

    @engine.task(
        name="quick",
        queue="images",
        lease=0.05,
        timeout=600,
        max_attempts=2,
        backoff=Backoff.fixed([0.05]),
        stages={"short": 0.05, "long": 600},
    )
    def quick(ctx, **extra):  # pragma: no cover
        return None

    @engine.task(name="brief", queue="other", lease=30, timeout=0.05, max_attempts=1)
    def brief(ctx, **extra):  # pragma: no cover
        return None

    return engine


@pytest.fixture
def engine(redis_client):
    """An engine without an executor: tasks wait in PENDING and tests claim them directly."""
    return register_test_types(Engine(redis_client, namespace="t", dispatcher=None))
