"""The core on a real Redis Cluster (3 masters + 3 replicas): queues spread over the shards by
their hash tag, the keys of no queue share one slot, and the engine carries on through a failover.

The contract tests of tests/engine run on the cluster too (the ``cluster`` param of
tests/engine/conftest.py); these cover what only a cluster has.
"""

from __future__ import annotations

import pytest
import redis
from redis.exceptions import RedisClusterException

from ghostless import Engine, RedisSetupError, State
from ghostless.core.cluster import is_cluster
from ghostless.core.keys import Keys
from tests.conftest import register_test_types
from tests.support.wait import wait_for_server_time, wait_until

QUEUES = [f"q{i}" for i in range(12)]


@pytest.fixture
def cluster_engine(redis_cluster):
    redis_cluster.flushall()
    client = redis_cluster.client()
    engine = Engine(client, namespace="t", dispatcher=None)
    for q in QUEUES:
        engine.task(name=f"job-{q}", queue=q, lease=0.05, max_attempts=2, backoff=[0.05])(lambda ctx, **kw: None)
    yield engine
    client.close()


def shard_of(cluster, key: str) -> int:
    return cluster.node_for_key(key).port


def test_each_queue_lives_on_one_shard_and_the_queues_spread_over_every_shard(redis_cluster, cluster_engine):
    tasks = {q: cluster_engine.submit(f"job-{q}", {}, owner="alice") for q in QUEUES}
    shards = {}
    for q, task in tasks.items():
        keys = cluster_engine.keys.task(task.id)
        on = {shard_of(redis_cluster, k) for k in (*keys, cluster_engine.keys.owner_index(q, "alice"))}
        assert len(on) == 1, f"queue {q}'s keys are on shards {on}"
        shards[q] = on.pop()
    assert len(set(shards.values())) == 3  # 12 queues' tags hash onto every one of the 3 shards


def test_keys_of_no_queue_share_the_global_slot_on_a_cluster_and_keep_their_names_on_one_redis(
    redis_cluster, cluster_engine
):
    keys = cluster_engine.keys
    assert is_cluster(cluster_engine.redis) and keys.cluster
    names = [keys.users(), keys.tokens(), keys.webhooks(), keys.queues(), keys.data_epoch()]
    names += [keys.periodic_state("nightly"), keys.scheduler_lock(), keys.session("d"), keys.login_code("d")]
    assert all("{@global}" in n for n in names)
    assert len({shard_of(redis_cluster, n) for n in names}) == 1
    assert keys.users() == "t:{@global}:users"
    assert Keys("t").users() == "t:users"  # one Redis: the names from before the tag


def test_users_and_tokens_work_on_a_cluster(cluster_engine):
    users = cluster_engine.users
    token = users.add("alice", admin=True)
    assert users.authenticate(token).name == "alice"
    second = users.add("alice")  # a second token: users and tokens change in one transaction
    assert [u.tokens for u in users.list()] == [2]
    assert users.revoke("alice")
    assert users.authenticate(token) is None and users.authenticate(second) is None


def test_the_sweeper_finds_due_work_on_every_shard(redis_cluster, cluster_engine):
    leases = [cluster_engine.claim(cluster_engine.submit(f"job-{q}", {}, owner="bob").id, "w1") for q in QUEUES]
    wait_for_server_time(
        cluster_engine.redis, max(cluster_engine.get(lease.task_id).lease_deadline for lease in leases) * 1000
    )
    report = cluster_engine.sweep()
    assert (report.expired, report.promoted) == (len(QUEUES), len(QUEUES))
    assert all(cluster_engine.get(lease.task_id).status == State.PENDING for lease in leases)
    stats = cluster_engine.stats()
    assert sorted(stats) == sorted(QUEUES)
    assert all(stats[q]["counts"]["PENDING"] == 1 for q in QUEUES)
    assert cluster_engine.check() == []
    listed, _ = cluster_engine.list_tasks(owner="bob", limit=100)
    assert sorted(t.id for t in listed) == sorted(lease.task_id for lease in leases)


def test_the_engine_carries_on_after_a_master_fails_over(private_cluster):
    """SIGKILL the master of a queue's shard: once its replica is promoted, submit, claim,
    complete and sweep work again on the same engine, and the promoted node's empty script
    cache is filled on first use."""
    engine = register_test_types(Engine(private_cluster.client(), namespace="t", dispatcher=None))
    before = engine.submit("render", {"prompt": "before"}, owner="alice")
    private_cluster.wait_replicas_synced()
    master = private_cluster.node_for_key(engine.keys.task(before.id).task)
    private_cluster.kill(master)
    promoted = private_cluster.wait_failover(master)
    assert promoted.port != master.port

    def submits():
        try:
            return engine.submit("render", {"prompt": "after"}, owner="alice")
        except (redis.RedisError, RedisClusterException):  # the client learns the new slot map on its next try
            return None

    after = wait_until(submits, timeout=30, what="a submit after the failover")
    lease = engine.claim(after.id, "w1")
    assert engine.complete(lease, {"ok": True}) == State.SUCCESS
    assert engine.get(before.id).status == State.PENDING  # replicated before the kill: kept
    engine.sweep()
    assert engine.check() == []


def test_the_start_up_check_looks_at_every_primary_and_names_the_one_that_may_evict(redis_cluster):
    primary = redis_cluster.master_nodes()[-1]
    primary.client().config_set("maxmemory-policy", "allkeys-lru")
    client = redis_cluster.client()
    try:
        with pytest.raises(RedisSetupError, match=rf"^127\.0\.0\.1:{primary.port}: Redis maxmemory-policy"):
            Engine(client, namespace="t", dispatcher=None, strict=True)
        with pytest.warns(RuntimeWarning, match=rf"127\.0\.0\.1:{primary.port}: .*'allkeys-lru'") as caught:
            Engine(client, namespace="t", dispatcher=None)
        assert len(caught) == 1  # the other primaries are fine
    finally:
        primary.client().config_set("maxmemory-policy", "noeviction")
        client.close()


def test_the_start_up_persistence_note_names_every_primary(redis_cluster, caplog):
    client = redis_cluster.client()
    try:
        with caplog.at_level("INFO", logger="ghostless"):
            Engine(client, namespace="t", dispatcher=None)
    finally:
        client.close()
    noted = {r.getMessage().split(": ", 1)[0] for r in caplog.records if "AOF" in r.getMessage()}
    assert noted == {f"127.0.0.1:{n.port}" for n in redis_cluster.master_nodes()}
