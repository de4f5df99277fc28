"""RQ's worker heartbeat, once a job in one round trip (engine/execution/lean_heartbeat.py, issue 15):
RQ sends three a job, each as three round trips; RQ's view of the worker stays the same."""

import pytest
import redis
from rq import SimpleWorker

from ghostless import Engine
from ghostless.execution import lean_heartbeat
from ghostless.execution.lean_heartbeat import LeanHeartbeat
from ghostless.execution.worker import build_worker
from tests.support.commands import sent_commands
from tests.worker.helpers import registered


class Lean(LeanHeartbeat, SimpleWorker):
    pass


@pytest.fixture
def worker(redis_client):
    return registered(Lean, redis_client, "lean")


def beat_of(worker) -> bytes:
    return worker.connection.hget(worker.key, "last_heartbeat")


def test_a_heartbeat_is_one_round_trip_and_one_just_after_another_is_not_sent(worker, monkeypatch):
    sent = sent_commands(monkeypatch, worker.connection)
    worker.heartbeat()
    first = beat_of(worker)
    assert worker.connection.ttl(worker.key) > worker.worker_ttl  # RQ's TTL: worker_ttl + 60
    worker.heartbeat()
    assert beat_of(worker) == first  # within BEAT_EVERY of the last: skipped
    monkeypatch.setattr(lean_heartbeat, "BEAT_EVERY", 0.0)
    worker.heartbeat()
    assert beat_of(worker) != first
    assert [c for c in sent if c in ("HSET", "EXPIRE")] == []  # each went as one pipeline


def test_after_a_heartbeat_with_its_own_ttl_the_next_default_one_restores_rqs(worker):
    worker.heartbeat()
    worker.heartbeat(90)  # RQ's while a work-horse runs
    assert worker.connection.ttl(worker.key) <= 90
    worker.heartbeat()  # at once: sent all the same
    assert worker.connection.ttl(worker.key) > worker.worker_ttl


def test_a_heartbeat_in_rqs_own_pipeline_counts_as_sent_unless_it_has_its_own_ttl(worker):
    with worker.connection.pipeline() as pipe:  # as RQ's suspension check sends it
        worker.heartbeat(pipeline=pipe)
        pipe.execute()
    first = beat_of(worker)
    worker.heartbeat()
    assert beat_of(worker) == first
    with worker.connection.pipeline() as pipe:
        worker.heartbeat(30, pipeline=pipe)
        pipe.execute()
    worker.heartbeat()
    assert worker.connection.ttl(worker.key) > worker.worker_ttl


def test_after_a_redis_failure_the_next_heartbeat_is_sent(redis_server):
    engine = Engine(redis_server.client(), namespace="lean", dispatcher=None)
    worker = build_worker(engine, ["lean"], "simple")
    worker.register_birth()
    worker.heartbeat()
    first = beat_of(worker)
    worker._redis_failed(ConnectionError("gone"))  # what the ride-out notes (engine/execution/outage.py)
    worker.heartbeat()  # its write tells whether Redis takes writes again
    assert beat_of(worker) != first


def test_a_burst_of_jobs_sends_one_rq_heartbeat_a_job(redis_server, monkeypatch):
    client = redis_server.client()
    client.flushall()
    engine = Engine(client, namespace="lean")

    @engine.task(queue="lean", lease=30)
    def noop(ctx):
        return None

    tasks = [engine.submit("noop", {}, owner="alice") for _ in range(20)]
    worker = build_worker(engine, ["lean"], "simple")
    asked, pipelines = [], []
    outer, execute = type(worker).heartbeat, redis.client.Pipeline.execute

    def asking(self, timeout=None, pipeline=None):
        if pipeline is None:
            asked.append(timeout)
        return outer(self, timeout, pipeline)

    def executing(self, *args, **kwargs):
        pipelines.append([c[0][0] for c in self.command_stack])
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(type(worker), "heartbeat", asking)
    monkeypatch.setattr(redis.client.Pipeline, "execute", executing)
    sent = sent_commands(monkeypatch, worker.connection)  # one round trip each
    assert worker.work(burst=True, logging_level="WARNING")
    assert all(engine.get(t.id).status == "SUCCESS" for t in tasks)
    assert asked.count(None) >= 3 * len(tasks)  # what RQ asks for: before and after each dequeue, after each job
    beats = [p for p in pipelines if p == ["HSET", "EXPIRE", "EXPIRE"]]  # a heartbeat alone, in one round trip
    alone = sent.count("EXPIRE") // 2  # RQ's way: HSET, EXPIRE, EXPIRE, each its own round trip
    assert len(beats) + alone <= len(tasks) + 2, (len(beats), alone)  # RQ alone: three heartbeats a job
    rqs_own = [p for p in pipelines if "EXPIRE" in p and p != ["HSET", "EXPIRE", "EXPIRE"]]
    assert rqs_own  # RQ's own pipelines (with the job's TTLs): as before
