"""RQ dispatch and RQ workers on a real Redis Cluster (3 masters + 3 replicas,
tests/support/cluster.py): submit -> RQ job -> a ``ghostless worker`` process on the cluster ->
outcome, with every RQ key of a queue's jobs in that queue's slot, one worker serving queues on
different shards in its order, and a killed worker's task recovered by the sweeper.

(Before engine/execution/rq_cluster.py, the first submit raised ``RedisClusterException: EVALSHA -
all keys must map to the same key slot``: RQ's unique enqueue over a job hash and a queue list.)
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from redis.cluster import key_slot
from rq.exceptions import DequeueTimeout

from ghostless import Config, Engine, State
from ghostless.core.keys import rq_queue_name, rq_wake_channel
from ghostless.execution.rq_cluster import WAKE_WAIT, ClusterQueue, RQClusterConnection
from ghostless.execution.rq_dispatch import RQDispatcher
from ghostless.execution.worker import build_worker
from tests.apps import basic
from tests.support.procs import app_env, start_sweeper
from tests.support.wait import server_ms, wait_for_server_time, wait_until
from tests.worker import cluster_app
from tests.worker.helpers import (
    LEASE,
    NS,
    OWNER,
    horse_of,
    logged,
    transitions,
    verbs,
    wait_logged,
    wait_terminal,
)

pytestmark = pytest.mark.slow
APP = "tests.worker.cluster_app:engine"


def slot(key: str) -> int:
    return key_slot(key.encode())


@pytest.fixture
def cluster(redis_cluster):
    redis_cluster.flushall()
    return redis_cluster


# The worker fixtures of tests/worker/conftest.py (procs) on the cluster instead of a server.
@pytest.fixture
def env(cluster):
    return app_env(cluster.url, NS, lease=LEASE)


@pytest.fixture
def engine(cluster):
    client = cluster.client(socket_timeout=10, socket_connect_timeout=5)
    yield cluster_app.register(Engine(client, namespace=NS))
    client.close()


def test_a_submit_enqueues_its_rq_job_in_the_slot_of_its_queue(engine, cluster):
    task = engine.submit("render", {"prompt": "cat"}, owner=OWNER)

    dispatch_id = engine.redis.hget(engine.keys.task(task.id).task, "dispatch_id").decode()
    job_id = f"{basic.QUEUE}-{dispatch_id}"
    rq_list = f"rq:queue:{NS}.{{{basic.QUEUE}}}"
    assert engine.redis.lrange(rq_list, 0, -1) == [job_id.encode()]
    job_key = f"rq:job:{{{basic.QUEUE}}}-{dispatch_id}"
    assert engine.redis.hget(job_key, "origin").decode() == f"{NS}.{{{basic.QUEUE}}}"
    queue_slot = slot(engine.keys.task(task.id).task)
    assert slot(rq_list) == slot(job_key) == queue_slot
    assert RQDispatcher(engine.redis, NS).job_exists(dispatch_id, basic.QUEUE)
    # the sweeper's question needs the queue on a cluster: a job id without it names no job
    with pytest.raises(ValueError, match="queue"):
        RQDispatcher(engine.redis, NS).job_exists(dispatch_id)


@pytest.mark.parametrize("worker_class", ["fork", "simple"])
def test_a_worker_process_on_the_cluster_runs_the_task_to_success(engine, procs, worker_class):
    worker = procs.worker(worker_class, app=APP)
    task = engine.submit("render", {"prompt": "cat", "steps": 2}, owner=OWNER)

    done = wait_terminal(engine, task.id)

    assert done.status == State.SUCCESS, verbs(engine, task.id)
    assert done.result["url"] == "https://example.invalid/cat.png"
    assert (done.attempt, done.worker, done.progress) == (1, worker.name, 1.0)
    assert (done.result["pid"] != worker.pid) if worker_class == "fork" else (done.result["pid"] == worker.pid)
    assert transitions(engine, task.id) == ["submit:->PENDING", "dispatch:PENDING->QUEUED"] + [
        "claim:QUEUED->PROCESSING",
        "complete:PROCESSING->SUCCESS",
    ]
    assert [v for v in verbs(engine, task.id) if v.startswith("stage:")] == [
        f"stage:{s}" for s in ("waiting_for_resource", "generating", "uploading")
    ]
    # RQ recorded the job as finished, in the queue's slot; the worker is in RQ's registry
    finished = f"rq:finished:{NS}.{{{basic.QUEUE}}}"
    assert slot(finished) == slot(engine.keys.task(task.id).task)
    wait_until(lambda: engine.redis.zcard(finished) == 1, 5, what="RQ's finished registry")
    workers = engine.dispatcher.workers()
    assert [w["name"] for w in workers] == [worker.name]
    assert basic.QUEUE in workers[0]["queues"] and not any("@" in q for q in workers[0]["queues"])


def test_one_worker_serves_queues_on_three_shards(engine, cluster, procs):
    queues = [basic.QUEUE, cluster_app.MAIL, cluster_app.OTHER]
    shards = {cluster.node_for_key(engine.keys.queue_key(q, "index")).port for q in queues}
    assert len(shards) == 3, "the test's queues must land on different shards"
    worker = procs.worker("fork", app=APP)
    tasks = [
        engine.submit("render", {"prompt": "a", "steps": 1}, owner=OWNER),
        engine.submit("relay", {"tag": "b"}, owner=OWNER),
        engine.submit("post", {"tag": "c"}, owner=OWNER),
        engine.submit("relay", {"tag": "d"}, owner=OWNER),
    ]

    done = [wait_terminal(engine, t.id) for t in tasks]

    assert [(d.status, d.worker) for d in done] == [(State.SUCCESS, worker.name)] * 4
    assert [d.result.get("queue") for d in done[1:]] == [cluster_app.MAIL, cluster_app.OTHER, cluster_app.MAIL]
    assert engine.check() == []


def test_a_busy_worker_takes_each_queue_by_priority_and_its_queues_in_order_across_shards(engine):
    started = []

    @engine.task(queue=cluster_app.MAIL, lease=30)
    def job_mail(ctx, name):
        started.append(name)

    @engine.task(queue=cluster_app.OTHER, lease=30)
    def job_other(ctx, name):
        started.append(name)

    # queued before the worker starts: it is saturated from its first pop
    for type_name, name, priority in [
        ("job_mail", "low-mail", -1),
        ("job_other", "mid-other", 0),
        ("job_mail", "high-mail", 3),
        ("job_other", "high-other", 3),
        ("job_mail", "mid-mail", 0),
    ]:
        engine.submit(type_name, {"name": name}, owner=OWNER, priority=priority)
    worker = build_worker(engine, queues=[cluster_app.MAIL, cluster_app.OTHER], worker_class="simple")

    assert worker.work(burst=True, logging_level="WARNING")
    # the worker's queue order (mail, then other), as RQ's; within a queue, priority first
    assert started == ["high-mail", "mid-mail", "low-mail", "high-other", "mid-other"]


def test_an_idle_worker_on_several_shards_wakes_at_an_enqueue_and_looks_at_all_its_lists(engine):
    connection = RQClusterConnection(engine.redis, rq_wake_channel(NS))
    lists = [f"rq:queue:{rq_queue_name(NS, q, tagged=True)}" for q in (cluster_app.MAIL, cluster_app.OTHER)]
    assert slot(lists[0]) != slot(lists[1])
    with pytest.raises(DequeueTimeout):
        ClusterQueue.lpop(lists, 1, connection=connection)  # nothing anywhere: times out
    assert ClusterQueue.lpop(lists, None, connection=connection) is None  # non-blocking: nothing

    waiting = threading.Event()
    wait = connection.wait_for_wake

    def noted_wait(timeout):
        waiting.set()
        wait(timeout)

    connection.wait_for_wake = noted_wait
    for announce in (True, False):
        waiting.clear()
        with ThreadPoolExecutor(1) as pool:
            popped = pool.submit(ClusterQueue.lpop, lists, 10, connection=connection)
            waiting.wait(5)
            pushed_at = time.monotonic()
            engine.redis.rpush(lists[1], f"job-{announce}")
            if announce:  # what the dispatcher does after each enqueue on a cluster
                engine.redis.publish(rq_wake_channel(NS), cluster_app.OTHER)
            assert popped.result(10) == (lists[1], f"job-{announce}".encode())
            took = time.monotonic() - pushed_at
        # announced: at once; unannounced (a lost PUBLISH): at the next look, within WAKE_WAIT
        assert took < WAKE_WAIT / 2 if announce else took < WAKE_WAIT + 1


def test_a_killed_worker_s_task_is_recovered_by_the_sweeper_and_run_by_another(engine, env, procs):
    sweeper = start_sweeper(env, app=APP, interval=0.2)
    procs.started.append(sweeper)
    first = procs.worker("fork", app=APP)
    task = engine.submit("sleepy", {"seconds": 1.0}, owner=OWNER)
    wait_logged(engine, task.id, "start")
    horse = horse_of(first)

    os.kill(first.pid, signal.SIGKILL)  # the parent first, so nobody is left to report
    os.kill(horse, signal.SIGKILL)
    first.popen.wait(5)
    second = procs.worker("fork", app=APP)

    done = wait_terminal(engine, task.id, timeout=20)

    assert (done.status, done.attempt, done.worker) == (State.SUCCESS, 2, second.name), verbs(engine, task.id)
    expire = [e for e in engine.history(task.id) if e.verb == "expire"]
    assert [(e.from_, e.to, e.reason) for e in expire] == [
        ("PROCESSING", "TIMEOUT", "heartbeat_lost"),
        ("TIMEOUT", "RETRY_WAITING", "heartbeat_lost"),
    ]
    assert [e.split(":")[0] for e in logged(engine, task.id, "done")] == ["2"]
    assert engine.check() == []


def test_the_sweeper_finds_a_lost_job_by_its_queue_and_dispatches_the_task_again(cluster):
    client = cluster.client(socket_timeout=10)
    engine = cluster_app.register(Engine(client, namespace=NS, config=Config(requeue_after=0.2)))
    kept = engine.submit("relay", {"tag": "kept"}, owner=OWNER)
    lost = engine.submit("post", {"tag": "lost"}, owner=OWNER)
    lost_dispatch = client.hget(engine.keys.task(lost.id).task, "dispatch_id").decode()
    rq_list = f"rq:queue:{rq_queue_name(NS, cluster_app.OTHER, tagged=True)}"
    assert client.lrem(rq_list, 0, f"{cluster_app.OTHER}-{lost_dispatch}") == 1  # a pop whose reply was lost
    wait_for_server_time(client, server_ms(client) + 300)

    report = engine.sweep()

    assert (report.dispatched, report.refreshed) == (1, 1)  # the lost job dispatched again; the other kept
    again = client.hget(engine.keys.task(lost.id).task, "dispatch_id").decode()
    assert again != lost_dispatch
    assert client.lrange(rq_list, 0, -1) == [f"{cluster_app.OTHER}-{again}".encode()]
    assert build_worker(engine, worker_class="simple").work(burst=True, logging_level="WARNING")
    assert [engine.get(t.id).status for t in (kept, lost)] == [State.SUCCESS, State.SUCCESS]
    client.close()


def test_standalone_redis_keeps_rq_s_own_names(redis_server):
    client = redis_server.client()
    client.flushall()
    engine = basic.register(Engine(client, namespace=NS))
    task = engine.submit("render", {"prompt": "cat"}, owner=OWNER)

    dispatch_id = client.hget(engine.keys.task(task.id).task, "dispatch_id").decode()
    assert client.lrange(f"rq:queue:{NS}.{basic.QUEUE}", 0, -1) == [dispatch_id.encode()]
    assert client.exists(f"rq:job:{dispatch_id}")
    assert RQDispatcher(client, NS).job_exists(dispatch_id)


def test_a_worker_cleans_up_the_job_of_a_worker_killed_mid_job_without_dying(engine):
    """RQ's maintenance (StartedJobRegistry.cleanup) fails an abandoned job and asks a plain RQ
    Queue to enqueue its dependents: a WATCH, then an SMEMBERS it reads at once. On a cluster
    that read came back as the pipeline itself and every worker that ran the maintenance died
    (``ValueError: Unknown type <class 'redis.cluster.ClusterPipeline'>``), again at each start."""
    from rq.job import JobStatus
    from rq.registry import FailedJobRegistry, StartedJobRegistry
    from rq.serializers import JSONSerializer

    from ghostless.execution.rq_cluster import ClusterJob

    task = engine.submit("render", {"prompt": "cat"}, owner=OWNER)
    dispatch_id = engine.redis.hget(engine.keys.task(task.id).task, "dispatch_id").decode()
    worker = build_worker(engine, worker_class="simple")
    name = rq_queue_name(NS, basic.QUEUE, tagged=True)
    job = ClusterJob.fetch(f"{basic.QUEUE}-{dispatch_id}", connection=worker.connection, serializer=JSONSerializer)
    job.set_status(JobStatus.STARTED)  # a worker took it, then was SIGKILLed: its wip entry lapsed
    started = StartedJobRegistry(name, connection=worker.connection, job_class=ClusterJob, serializer=JSONSerializer)
    engine.redis.zadd(started.key, {f"{job.id}:execution-1": 1})

    worker.clean_registries()

    assert engine.redis.zcard(started.key) == 0
    failed = FailedJobRegistry(name, connection=worker.connection, job_class=ClusterJob, serializer=JSONSerializer)
    assert job.id in failed.get_job_ids()
