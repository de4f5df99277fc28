"""A full Redis (maxmemory reached under noeviction) refuses writes: every engine write raises one
typed error, RedisFull, with redis-py's OutOfMemoryError as its cause, and nothing changes."""

import pytest
import redis

from ghostless import Config, Engine, GhostlessError, RedisFull, State
from tests.conftest import register_test_types
from tests.support.fakes import FakeDispatcher
from tests.support.redis_server import FullRedis
from tests.support.snapshots import raw_task, snapshot
from tests.support.wait import server_ms, wait_for_server_time


@pytest.fixture
def server(private_redis):
    return private_redis()


@pytest.fixture
def full(server):
    """Makes the private Redis full (maxmemory 1 byte: every write refused) while active."""
    client = server.client()
    yield FullRedis(client)
    client.close()


@pytest.fixture
def engine(server):
    client = server.client()
    yield register_test_types(Engine(client, namespace="t", dispatcher=None))
    client.close()


def assert_refused_as_full(call):
    with pytest.raises(RedisFull) as caught:
        call()
    assert isinstance(caught.value, GhostlessError)
    assert isinstance(caught.value.__cause__, redis.exceptions.OutOfMemoryError)
    assert "full" in str(caught.value)


def test_a_submit_refused_by_a_full_redis_raises_redis_full(engine, full):
    engine.submit("render", {"prompt": "first"}, owner="alice")  # the queue is known to this process
    with full:
        assert_refused_as_full(lambda: engine.submit("render", {"prompt": "a cat"}, owner="alice"))
    assert engine.stats()["images"]["counts"]["PENDING"] == 1


def test_the_first_submit_of_a_process_on_a_full_redis_raises_redis_full(engine, full):
    with full:
        assert_refused_as_full(lambda: engine.submit("render", {"prompt": "a cat"}, owner="alice"))


def test_lease_holder_and_owner_writes_on_a_full_redis_raise_redis_full_and_change_nothing(engine, full):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    other = engine.submit("render", {"prompt": "a dog"}, owner="alice")
    lease = engine.claim(task.id, "w1")
    before = snapshot(engine, task.id, other.id)
    with full:
        assert_refused_as_full(lambda: engine.heartbeat(lease))
        assert_refused_as_full(lambda: engine.complete(lease, {"ok": True}))
        assert_refused_as_full(lambda: engine.claim(other.id, "w2"))
        assert_refused_as_full(lambda: engine.cancel(other.id, by="alice"))
    assert snapshot(engine, task.id, other.id) == before
    assert engine.get(task.id).status == State.PROCESSING


def test_a_dispatch_whose_enqueue_is_refused_raises_redis_full(server, full):
    class FullExecutor(FakeDispatcher):
        def enqueue(self, *a, **kw):
            raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")

    client = server.client()
    engine = register_test_types(Engine(client, namespace="t", dispatcher=FullExecutor()))
    assert_refused_as_full(lambda: engine.submit("render", {"prompt": "a cat"}, owner="alice"))
    client.close()


def test_a_claim_refused_by_a_full_redis_has_its_lost_job_looked_at_within_seconds_once_memory_is_freed(server, full):
    executor = FakeDispatcher()
    client = server.client()
    # a grace the sweep below does not outlast on a loaded host (it makes the kept report, then reads what is due)
    config = Config(dispatch_grace=1.0)
    engine = register_test_types(Engine(client, namespace="t", config=config, dispatcher=executor))
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    [dispatch_id] = executor.dispatches(task.id)
    executor.lose(dispatch_id)  # RQ handed the job to the worker whose claim fails
    with full:
        assert_refused_as_full(lambda: engine.claim(task.id, "w1", dispatch_id=dispatch_id))
    k = engine.keys.task(task.id)
    assert client.zscore(k.dispatch, task.id) > server_ms(client) + 200_000  # the report was refused too
    engine.sweep()  # memory freed: the kept report is made, due within dispatch_grace
    wait_for_server_time(client, client.zscore(k.dispatch, task.id))
    assert engine.sweep().dispatched == 1
    assert raw_task(engine, task.id)["dispatch_id"] in executor.jobs
    client.close()
