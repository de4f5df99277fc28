"""The web app on a real Redis Cluster (3 masters + 3 replicas) and through Sentinel: streams of
tasks on different shards, the feed across shards and its Last-Event-ID resumption, the JSON API,
a stream that goes on through a Sentinel failover, and ``ghostless web --redis-url redis+cluster://``.

(Before, the app could not serve a cluster at all: its bounded pool copied a plain connection
pool, which neither a cluster nor a Sentinel client has, and its stream reader's one XREAD over
every queue is refused by a cluster across slots.)
"""

from __future__ import annotations

import os
import sys
import threading

import pytest
import redis

from ghostless import Engine
from ghostless.core.sweepers import record_tick
from ghostless.web import close_app, create_app, queries as wq
from ghostless.web.broker import Broker
from ghostless.web.coalesce import CoalescedScripts
from ghostless.web.positions import Positions
from tests.conftest import register_test_types
from tests.support.procs import ROOT, Proc
from tests.support.redis_server import free_port
from tests.support.wait import wait_until

from .conftest import TEST_CONFIG
from .sse_client import open_sse
from .test_cli_web import APP, _get

pytestmark = pytest.mark.slow


def serve(url: str):
    """(engine, app, alice's auth headers): an app on an Engine from ``url``."""
    engine = register_test_types(Engine.from_url(url, namespace="t", dispatcher=None))
    app = create_app({**TEST_CONFIG, "GHOSTLESS_ENGINE": engine})
    return engine, app, {"Authorization": f"Bearer {engine.users.add('alice')}"}


@pytest.fixture
def on_cluster(redis_cluster):
    redis_cluster.flushall()
    engine, app, auth = serve(redis_cluster.url)
    # "images" and "other" (tests/conftest.py's queues) are on two different shards
    assert len({redis_cluster.node_for_key(engine.keys.queue_key(q, "events")).port for q in ("images", "other")}) == 2
    yield engine, app, auth
    close_app(app)
    engine.redis.close()


def test_on_a_cluster_the_stream_of_a_task_on_either_shard_carries_its_live_events(on_cluster):
    engine, app, auth = on_cluster
    client = app.test_client()
    for type_name in ("render", "brief"):
        task = engine.submit(type_name, {}, owner="alice")
        stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth)
        assert stream.next()["event"] == "snapshot"
        engine.complete(engine.claim(task.id, "w1"), {})
        assert [e["data"]["to"] for e in stream.rest()] == ["PROCESSING", "SUCCESS"]


def test_on_a_cluster_the_feed_carries_both_shards_and_resumes_from_last_event_id(on_cluster):
    engine, app, auth = on_cluster
    client = app.test_client()
    feed = open_sse(client, "/api/events", headers=auth)
    assert feed.next()["event"] == "ready"
    image, brief = engine.submit("render", {}, owner="alice"), engine.submit("brief", {}, owner="alice")
    seen = feed.take(2)
    assert sorted(e["data"]["task_id"] for e in seen) == sorted([image.id, brief.id])
    last = max(seen, key=lambda e: len(e["id"]))["id"]
    assert set(Positions.parse(last).queues) == {"images", "other"}
    feed.close()
    missed = [engine.submit("brief", {}, owner="alice").id, engine.submit("render", {}, owner="alice").id]
    feed = open_sse(client, "/api/events", headers={**auth, "Last-Event-ID": last})
    assert sorted(e["data"]["task_id"] for e in feed.take(2)) == sorted(missed)
    live = [engine.submit("render", {}, owner="alice").id, engine.submit("brief", {}, owner="alice").id]
    assert sorted(e["data"]["task_id"] for e in feed.take(2)) == sorted(live)
    feed.close()


def test_on_a_cluster_the_json_api_submits_and_reads_tasks_on_both_shards(on_cluster):
    engine, app, auth = on_cluster
    client = app.test_client()
    for type_name, queue in (("render", "images"), ("brief", "other")):
        created = client.post("/api/tasks", json={"type": type_name, "args": {}}, headers=auth)
        assert created.status_code == 201, created.get_data(as_text=True)
        task_id = created.get_json()["task"]["id"]
        got = client.get(f"/api/tasks/{task_id}", headers=auth).get_json()["task"]
        assert (got["status"], got["owner"], engine.get(task_id).queue) == ("PENDING", "alice", queue)
    listed = client.get("/api/tasks", headers=auth).get_json()["tasks"]
    assert len(listed) == 2


def test_on_a_cluster_concurrent_openings_read_each_shards_tasks_on_their_own(on_cluster):
    engine, app, _auth = on_cluster
    web = app.extensions["ghostless"].engine
    # Not coalesced: a cluster pipeline fails whole when one shard is unreachable (web/pool.py).
    assert not isinstance(web.scripts, CoalescedScripts)
    tasks = [
        engine.submit(type_name, {}, owner=owner) for type_name in ("render", "brief") for owner in ("alice", "bob")
    ]
    tasks *= 5
    start, out = threading.Barrier(len(tasks)), [None] * len(tasks)

    def read(i, task):
        start.wait()
        out[i] = wq.snapshot(web, task.id, "alice")

    threads = [threading.Thread(target=read, args=(i, t)) for i, t in enumerate(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [s[0] and s[0].id for s in out] == [t.id if t.owner == "alice" else None for t in tasks]


def test_through_sentinel_a_stream_goes_on_after_the_primary_fails_over(sentinels):
    engine, app, auth = serve(sentinels.url)
    try:
        client = app.test_client()
        task = engine.submit("render", {}, owner="alice")
        stream = open_sse(client, f"/api/tasks/{task.id}/events", headers=auth)
        assert stream.next()["event"] == "snapshot"
        lease = engine.claim(task.id, "w1")
        claimed = stream.next()
        assert claimed["data"]["to"] == "PROCESSING"
        engine.redis.execute_command("WAIT", 1, 5000)  # the replica has it all
        old = sentinels.master_address()
        sentinels.kill_primary()
        sentinels.wait_failover(old[1])
        wait_until(lambda: _completes(engine, lease), timeout=15, what="the engine on the new primary")
        events = stream.rest(timeout=15)
        if events[-1:] and events[-1]["data"].get("to") == "SUCCESS":
            tail = events  # the stream went on across the failover
        else:  # or it ended at the failover: the browser reconnects with its Last-Event-ID
            stream = open_sse(client, f"/api/tasks/{task.id}/events", headers={**auth, "Last-Event-ID": claimed["id"]})
            tail = stream.rest(timeout=15)
        assert [e["data"]["to"] for e in tail] == ["SUCCESS"]
    finally:
        close_app(app)


def _completes(engine, lease) -> bool:
    try:
        engine.complete(lease, {})
    except (redis.ConnectionError, redis.TimeoutError):  # while the client finds the new primary
        return False
    return True


def test_ghostless_web_serves_a_cluster_url(redis_cluster):
    redis_cluster.flushall()
    port = free_port()
    env = {**os.environ, "GHOSTLESS_TEST_NS": "t", "GHOSTLESS_SECRET_KEY": "k", "PYTHONPATH": str(ROOT)}
    env.pop("GHOSTLESS_TEST_FAKE", None)
    env.pop("GHOSTLESS_REDIS_URL", None)
    args = ["web", "--app", APP, "--redis-url", redis_cluster.url, "--port", str(port), "--workers", "1"]
    proc = Proc([sys.executable, "-m", "ghostless", *args, "--threads", "4"], env)
    try:
        wait_until(
            lambda: _get(f"http://127.0.0.1:{port}/healthz") == (200, {"status": "ok"}),
            timeout=30,
            what="ghostless web on the cluster to serve /healthz",
        )
        assert _get(f"http://127.0.0.1:{port}/readyz")[0] == 503  # no sweeper has ticked yet
        record_tick(Engine.from_url(redis_cluster.url, namespace="t", dispatcher=None), "test-sweeper")
        assert _get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    finally:
        proc.stop()


def test_on_a_cluster_the_reader_goes_on_through_a_shard_failover_from_its_last_positions(private_cluster):
    engine = register_test_types(Engine.from_url(private_cluster.url, namespace="t", dispatcher=None))
    broker = Broker(engine, block_ms=50)
    try:
        sub = broker.subscribe(everything=True)
        before = [engine.submit("render", {}, owner="alice").id, engine.submit("brief", {}, owner="alice").id]
        assert sorted(ids_of(sub, 2)) == sorted(before)
        # One more event of the shard that will fail, on its replica too; the reader may or may
        # not have read it before the kill: it is delivered once either way.
        shard = private_cluster.node_for_key(engine.keys.queue_key("images", "events"))
        last = engine.submit("render", {}, owner="alice").id
        key = engine.keys.queue_key("images", "events")
        wait_until(lambda: replica_has(private_cluster, shard, key, last), what="the replica to have the event")
        private_cluster.kill(shard)
        during = engine.submit("brief", {}, owner="alice").id  # the other shard's events go on
        private_cluster.wait_failover(shard)
        after = wait_until(lambda: _submits(engine), timeout=15, what="a submit on the promoted replica")
        assert sorted(ids_of(sub, 3, timeout=20)) == sorted([last, during, after])
        assert sub.next(0.3) is None  # nothing twice
    finally:
        broker.close()
        engine.redis.close()


def test_on_a_cluster_a_reader_of_one_queue_blocks_in_one_xread_as_on_one_redis(redis_cluster, monkeypatch):
    redis_cluster.flushall()
    engine = Engine.from_url(redis_cluster.url, namespace="t", dispatcher=None)
    engine.task(name="solo", queue="solo")(lambda ctx: None)
    broker = Broker(engine, block_ms=2000)
    try:
        sub = broker.subscribe(everything=True)
        wait_until(lambda: engine.submit("solo", {}, owner="alice") and sub.next(0.05), what="the first event")
        reads, pipelines, xread = [], [], broker._client.xread
        monkeypatch.setattr(broker._client, "xread", lambda *a, **kw: reads.append(kw) or xread(*a, **kw))
        monkeypatch.setattr(broker._client, "pipeline", lambda *a, **kw: pipelines.append(a))
        task = engine.submit("solo", {}, owner="alice")
        assert wait_until(lambda: sub.next(0.05), what="the event")["task_id"] == task.id
        assert pipelines == [] and {kw["block"] for kw in reads} == {2000}
    finally:
        broker.close()
        engine.redis.close()


def ids_of(sub, n: int, timeout: float = 10.0) -> list[str]:
    return [
        wait_until(lambda: sub.next(0.05), timeout=timeout, what=f"event {i + 1} of {n}")["task_id"] for i in range(n)
    ]


def replica_has(cluster, primary, key: str, task_id: str) -> bool:
    """Whether the replica of ``primary`` has the event of ``task_id`` last in the stream ``key``."""
    for node in cluster.replica_nodes():
        if int(node.client(socket_timeout=1).info("replication")["master_port"]) == primary.port:
            client = node.client(socket_timeout=1)
            client.execute_command("READONLY")
            rows = client.xrevrange(key, count=1)
            return bool(rows) and rows[0][1][b"id"].decode() == task_id
    return False


def _submits(engine) -> str | None:
    try:
        return engine.submit("render", {}, owner="alice").id
    except (redis.ConnectionError, redis.TimeoutError):
        return None
