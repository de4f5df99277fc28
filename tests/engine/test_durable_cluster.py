"""Durable acknowledgements on a real Redis Cluster (3 masters + 3 replicas): each write waits on
the connection of the primary that owns its queue's slot, a sweeper batch once per shard it wrote
to, and the engine carries on through failovers (MOVED, an unreachable old primary, the promoted
node's empty script cache). The contract tests shared with one Redis are in test_durable.py."""

from __future__ import annotations

import pytest
import redis

from ghostless import Config, Engine, ReplicationTimeout, State
from ghostless.core.errors import Code
from tests.conftest import need_redis_cli
from tests.support.cluster import Cluster
from tests.support.replicas import OnCluster, stopped, wait_calls
from tests.support.wait import wait_for_server_time, wait_until

QUEUES = [f"q{i}" for i in range(12)]
TIMEOUT = 0.3  # wait_timeout where a replica does not answer (s)
PATIENT = 10.0  # where it does (test_durable.py says why so long)


def durable(client, timeout: float = PATIENT, replicas: int = 1) -> Engine:
    config = Config(wait_replicas=replicas, wait_timeout=timeout)
    engine = Engine(client, namespace="t", config=config, dispatcher=None)
    engine.scripts.ensure_loaded()  # on every primary: no NOSCRIPT (and its first WAIT) in the counts
    for q in QUEUES:
        engine.task(name=f"job-{q}", queue=q, lease=0.05, max_attempts=2, backoff=[0.05])(lambda ctx, **kw: None)
        # a heartbeat's socket timeout is a third of its lease: longer than the waits here
        engine.task(name=f"long-{q}", queue=q, lease=3.0, max_attempts=2)(lambda ctx, **kw: None)
    return engine


def by_shard(setup: OnCluster, engine: Engine) -> dict[int, str]:
    """One queue per shard: {primary's port: queue}."""
    out: dict[int, str] = {}
    for q in QUEUES:
        out.setdefault(setup.primary_for(engine.keys.queue_key(q, "index")).port, q)
    assert len(out) == 3, out
    return out


def status_on_replica(setup: OnCluster, engine: Engine, task_id: str):
    key = engine.keys.task(task_id).task
    return setup.replica_reader(key).hget(key, "status")


def test_writes_on_every_shard_wait_on_that_shard_and_are_on_its_replica_when_they_return(redis_cluster):
    setup = OnCluster.make(redis_cluster)
    engine = durable(setup.client())
    for port, q in by_shard(setup, engine).items():
        primary = setup.primary_for(engine.keys.queue_key(q, "index"))
        others = [n for n in redis_cluster.master_nodes() if n.port != port]
        before, others_before = wait_calls(primary.client()), [wait_calls(n.client()) for n in others]
        task = engine.submit(f"job-{q}", {}, owner="alice")
        assert status_on_replica(setup, engine, task.id) == b"PENDING"
        lease = engine.claim(task.id, "w1")
        assert status_on_replica(setup, engine, task.id) == b"PROCESSING"
        assert engine.complete(lease, {"ok": q}) == State.SUCCESS
        assert status_on_replica(setup, engine, task.id) == b"SUCCESS"
        assert wait_calls(primary.client()) - before == 3  # a WAIT per write, on the shard's primary
        assert [wait_calls(n.client()) for n in others] == others_before  # and none elsewhere


def expire_in_one_batch(engine: Engine, leases) -> list:
    """The sweeper's kind of batch (a ScriptBatch of expires), over the queues of ``leases``: the
    sweeper itself sends one per queue, so one shard; a batch over several waits on each."""
    wait_for_server_time(engine.redis, max(engine.get(lease.task_id).lease_deadline for lease in leases) * 1000)
    pipe = engine.scripts.pipeline()
    for lease in leases:
        engine.scripts.expire(engine.keys.task(lease.task_id), lease.task_id, client=pipe)
    return engine.scripts.replies(pipe)


def test_a_batch_over_every_shard_waits_once_on_each(redis_cluster):
    setup = OnCluster.make(redis_cluster)
    engine = durable(setup.client())
    leases = [engine.claim(engine.submit(f"job-{q}", {}, owner="bob").id, "w1") for q in QUEUES]
    before = {n.port: wait_calls(n.client()) for n in redis_cluster.master_nodes()}
    replies = expire_in_one_batch(engine, leases)
    assert [r[0] for r in replies] == [Code.OK] * len(QUEUES)
    after = {n.port: wait_calls(n.client()) for n in redis_cluster.master_nodes()}
    assert {p: after[p] - before[p] for p in before} == dict.fromkeys(before, 1)
    for lease in leases:  # each on its shard's replica when the batch returned (a lost lease: retried)
        assert status_on_replica(setup, engine, lease.task_id) == b"PENDING"


def test_a_shard_whose_replica_is_stopped_times_out_while_the_other_shards_succeed(private_cluster):
    setup = OnCluster.make(private_cluster)
    patient = durable(setup.client())
    engine = durable(setup.client(), timeout=TIMEOUT)
    shards = by_shard(setup, engine)
    (stuck_port, stuck), *fine = shards.items()
    stuck_task = patient.submit(f"job-{stuck}", {}, owner="alice")
    leases = [patient.claim(patient.submit(f"job-{q}", {}, owner="alice").id, "w1") for _, q in fine]
    # found before one is stopped (asking its role would time out)
    readers = [setup.replica_reader(engine.keys.queue_key(q, "index")) for _, q in fine]
    with stopped(setup.replica_for(engine.keys.queue_key(stuck, "index"))):
        with pytest.raises(ReplicationTimeout) as err:
            engine.claim(stuck_task.id, "w1")
        assert (err.value.verb, err.value.acked, err.value.wanted) == ("claim", 0, 1)
        for lease, reader in zip(leases, readers):  # another shard's replica acknowledges at once
            assert engine.complete(lease, {"ok": True}) == State.SUCCESS
            assert reader.hget(engine.keys.task(lease.task_id).task, "status") == b"SUCCESS"

        # a batch over every shard: the stopped one's WAIT counts 0, the smallest; all of it ran
        plain = durable(engine.redis, replicas=0)  # sets up without waiting
        more = [plain.claim(plain.submit(f"job-{q}", {}, owner="bob").id, "w1") for q in shards.values()]
        with pytest.raises(ReplicationTimeout, match="pipeline of 3 scripts") as err:
            expire_in_one_batch(engine, more)
        assert err.value.acked == 0 and [r[0] for r in err.value.reply] == [Code.OK] * 3
        assert all(engine.get(lease.task_id).status != State.PROCESSING for lease in more)
    assert engine.get(stuck_task.id).status == State.PROCESSING  # the timed-out claim stands
    assert stuck_port in {n.port for n in private_cluster.master_nodes()}


def test_durable_writes_carry_on_through_a_manual_failover_and_a_killed_primary(private_cluster):
    """A manual failover: the old primary answers MOVED and the promoted replica has no scripts.
    A killed primary: its connection is refused before anything is sent; once its replica took
    over, that shard has no replica (acked 0) until the old primary rejoins as one."""
    setup = OnCluster.make(private_cluster)
    engine = durable(setup.client())
    quick = durable(engine.redis, timeout=TIMEOUT)
    q = next(iter(by_shard(setup, engine).values()))
    key = engine.keys.queue_key(q, "index")
    task = engine.submit(f"long-{q}", {}, owner="alice")

    old = setup.primary_for(key)
    private_cluster.promote(private_cluster.replica_of(old))
    assert setup.primary_for(key).port != old.port
    lease = engine.claim(task.id, "w1")  # MOVED, then NOSCRIPT: both handled, nothing raised
    assert status_on_replica(setup, engine, task.id) == b"PROCESSING"  # the old primary has it
    assert engine.get(task.id).attempt == 1 and len(engine.history(task.id)) == 2  # claimed once

    primary = setup.primary_for(key)
    private_cluster.kill(primary)
    promoted = private_cluster.wait_failover(primary)
    with pytest.raises(ReplicationTimeout) as err:  # sent to the promoted node, which has no replica
        quick.heartbeat(lease)
    assert (err.value.verb, err.value.acked) == ("heartbeat", 0)
    private_cluster.restart(primary)  # rejoins as the promoted node's replica
    rp = promoted.client()
    wait_until(lambda: rp.wait(1, 100) >= 1, timeout=30, what="the old primary replicating again")
    assert engine.complete(lease, {"ok": True}) == State.SUCCESS
    assert status_on_replica(setup, engine, task.id) == b"SUCCESS"
    assert engine.check() == []


def test_a_write_after_its_queues_slot_moved_to_another_shard_follows_moved_and_waits_there(private_cluster):
    """Resharding moves the queue's slot and keys to another primary; the engine's slot map still
    names the old one, which answers MOVED: the script runs once, on the new owner, and WAIT goes on
    that connection (the new owner's replica has the write)."""
    setup = OnCluster.make(private_cluster)
    engine = durable(setup.client())
    q = QUEUES[0]
    key = engine.keys.queue_key(q, "index")
    task = engine.submit(f"job-{q}", {}, owner="alice")
    lease = engine.claim(task.id, "w1")
    source = setup.primary_for(key)
    target = next(n for n in private_cluster.master_nodes() if n.port != source.port)
    slot, src = engine.redis.keyslot(key), source.client()
    ids = {n.port: n.client().execute_command("CLUSTER MYID").decode() for n in (source, target)}
    target.client().execute_command("CLUSTER SETSLOT", slot, "IMPORTING", ids[source.port])
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", ids[target.port])
    keys = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
    src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
    for node in (target, source):  # as redis-cli --cluster reshard ends a slot's move
        node.client().execute_command("CLUSTER SETSLOT", slot, "NODE", ids[target.port])
    wait_until(lambda: setup.primary_for(key).port == target.port, what="the slot moved")
    private_cluster.wait_replicas_synced()
    before = wait_calls(target.client())

    engine.progress(lease, 0.5, "half")  # the first call since: sent to the source, MOVED
    assert wait_calls(target.client()) - before == 1
    assert setup.replica_reader(key).hget(engine.keys.task(task.id).task, "progress") == b"0.5"
    assert engine.complete(lease, {"ok": True}) == State.SUCCESS
    assert status_on_replica(setup, engine, task.id) == b"SUCCESS"
    assert len(engine.history(task.id)) == 3  # submitted, claimed, completed: each once


def test_a_write_whose_connection_is_lost_after_sending_raises_and_is_not_sent_again():
    """The primary stops answering once the claim is sent (SIGSTOP): the call raises the client's
    TimeoutError instead of sending the claim again; when the primary resumes, the claim it had
    received runs, once. (A cluster of its own: a node timeout long enough that the pause is no
    failover.)"""
    need_redis_cli()
    cluster = Cluster(node_timeout_ms=5000).start()
    try:
        setup = OnCluster.make(cluster)
        engine = durable(cluster.client(socket_timeout=0.5), timeout=TIMEOUT)
        q = QUEUES[0]
        task = engine.submit(f"job-{q}", {}, owner="alice")
        primary = setup.primary_for(engine.keys.queue_key(q, "index"))
        with stopped(primary), pytest.raises(redis.TimeoutError):
            engine.claim(task.id, "w1")
        cluster.wait_ok()
        claimed = wait_until(lambda: engine.get(task.id).status == State.PROCESSING, what="the claim ran")
        assert claimed and engine.get(task.id).attempt == 1
        assert [e.to for e in engine.history(task.id)].count("PROCESSING") == 1
    finally:
        cluster.close()
