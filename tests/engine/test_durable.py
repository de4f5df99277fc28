"""Durable acknowledgements (issue 13, item 3): ``Config(wait_replicas=N, wait_timeout=s)``.

Every script that writes is followed by WAIT on the connection that ran it; with fewer than N
replicas acknowledging within ``wait_timeout`` the call raises ReplicationTimeout (the write
stands on the primary). Run against a real primary and replica (two private redis-servers) and a
real Redis Cluster (3 masters + 3 replicas: the replica of the shard that took the write);
fakeredis has no WAIT, so the engine refuses ``wait_replicas > 0`` on it. What only a cluster has
is in tests/engine/test_durable_cluster.py.
"""

from __future__ import annotations

import contextlib
import time

import fakeredis
import pytest

from ghostless import Config, Engine, RedisSetupError, ReplicationTimeout, State
from tests.conftest import register_test_types
from tests.support.lua import forget_lua
from tests.support.replicas import OnCluster, Standalone, stopped
from tests.support.wait import wait_for_server_time, wait_until

TIMEOUT = 0.3  # wait_timeout where the replica is stopped (s)
#: wait_timeout where the replica runs: its ACK usually comes within a millisecond, but Redis 7.0
#: was seen taking over 300 ms right after the sync on a loaded machine
PATIENT = 10.0


@pytest.mark.parametrize(
    "kw",
    [
        {"wait_replicas": -1},
        {"wait_replicas": 1.5},
        {"wait_replicas": True},
        {"wait_replicas": "1"},
        {"wait_timeout": 0},
        {"wait_timeout": -1},
        {"wait_timeout": float("inf")},
        {"wait_timeout": float("nan")},
        {"wait_timeout": "1"},
    ],
)
def test_bad_wait_settings_are_refused(kw):
    with pytest.raises(ValueError, match="wait_"):
        Config(**kw)


def test_fakeredis_cannot_wait_so_the_engine_refuses_wait_replicas():
    """fakeredis has no WAIT: skipping it would pretend to a durability nobody checks."""
    with pytest.raises(RedisSetupError, match="fakeredis has no WAIT"):
        Engine(fakeredis.FakeRedis(), config=Config(wait_replicas=1), dispatcher=None)
    Engine(fakeredis.FakeRedis(), config=Config(wait_replicas=0), dispatcher=None)  # the default: fine


@pytest.fixture(params=["real", "cluster"])
def setup(request, private_redis):
    """A primary with a replica in sync, or the session's Redis Cluster (emptied)."""
    if request.param == "real":
        return Standalone.make(private_redis)
    return OnCluster.make(request.getfixturevalue("redis_cluster"))


@pytest.fixture(params=["real", "cluster"])
def breakable(request, private_redis):
    """``setup`` for tests that stop a replica: on a cluster, one of the test's own."""
    if request.param == "real":
        return Standalone.make(private_redis)
    return OnCluster.make(request.getfixturevalue("private_cluster"))


def durable(setup, replicas: int = 1, timeout: float = PATIENT) -> Engine:
    config = Config(wait_replicas=replicas, wait_timeout=timeout)
    return register_test_types(Engine(setup.client(), namespace="t", config=config, dispatcher=None))


def test_each_write_returns_once_the_replica_has_it_and_reads_never_wait(setup):
    engine = durable(setup)
    rr = setup.replica_reader(engine.keys.queue_key("default", "index"))
    seen_on_replica = lambda tid: rr.hget(engine.keys.task(tid).task, "status").decode()  # noqa: E731

    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    assert seen_on_replica(task.id) == "PENDING"  # read at once: WAIT already saw it there
    lease = engine.claim(task.id, "w1")
    assert seen_on_replica(task.id) == "PROCESSING"
    engine.heartbeat(lease)
    engine.progress(lease, 0.5, "half")
    assert rr.hget(engine.keys.task(task.id).task, "progress") == b"0.5"
    engine.complete(lease, {"ok": 1})
    assert seen_on_replica(task.id) == "SUCCESS"
    assert rr.lindex(engine.keys.task(task.id).body, 1) == b'{"ok":1}'

    before = setup.waits()
    assert engine.get(task.id).status == State.SUCCESS
    engine.sweep()  # nothing due: the due script only reads
    assert setup.waits() == before, "a read-only call sent WAIT"


def test_a_write_the_replica_does_not_acknowledge_raises_after_wait_timeout(breakable):
    patient, engine = durable(breakable), durable(breakable, timeout=TIMEOUT)
    task = patient.submit("render", {"prompt": "p"}, owner="alice")
    lease = patient.claim(task.id, "w1")
    with stopped(breakable.replica_for(engine.keys.task(task.id).task)):
        start = time.monotonic()
        with pytest.raises(ReplicationTimeout) as err:
            engine.complete(lease, {"ok": 1})
        took = time.monotonic() - start
        assert engine.get(task.id).status == State.SUCCESS  # the write happened on the primary
        assert engine.get(task.id).status == State.SUCCESS  # and reads do not wait for the replica
    assert TIMEOUT * 0.8 <= took < TIMEOUT + 2.0, took
    e = err.value
    assert (e.verb, e.task_id, e.acked, e.wanted) == ("complete", task.id, 0, 1)
    assert task.id in str(e) and "may not survive a failover" in str(e)
    assert e.reply[1] == "SUCCESS"


def test_a_claim_that_times_out_carries_its_lease_reply_and_the_replica_catches_up(breakable):
    engine = durable(breakable, timeout=TIMEOUT)
    task = durable(breakable).submit("render", {"prompt": "p"}, owner="alice")
    key = engine.keys.task(task.id).task
    with stopped(breakable.replica_for(key)), pytest.raises(ReplicationTimeout) as err:
        engine.claim(task.id, "w1")
    assert err.value.verb == "claim" and int(err.value.reply[1]) == 1  # the token it took
    rr = breakable.replica_reader(key)
    wait_until(lambda: rr.hget(engine.keys.task(task.id).task, "status") == b"PROCESSING", what="replica caught up")


def test_more_replicas_than_there_are_times_out_with_the_count_that_acked(setup):
    engine = durable(setup, replicas=2, timeout=2.0)  # waits it all out: long enough for the one to ack
    with pytest.raises(ReplicationTimeout) as err:
        engine.submit("render", {"prompt": "p"}, owner="alice")
    assert (err.value.verb, err.value.acked, err.value.wanted) == ("submit", 1, 2)


def test_a_sweeper_batch_ends_with_one_wait(breakable):
    """One queue: one shard on a cluster, so one WAIT there too."""
    engine, rp = durable(breakable), breakable.client()
    leases = [engine.claim(engine.submit("quick", {}, owner="alice").id, "w1") for _ in range(3)]
    wait_for_server_time(rp, max(engine.get(lease.task_id).lease_deadline for lease in leases) * 1000)
    before = breakable.waits()
    report = engine.sweep()
    assert report.expired == 3
    # one WAIT for the pipeline of three expires (and one per other write the sweep made)
    assert 1 <= breakable.waits() - before < 3
    plain = register_test_types(Engine(rp, namespace="t", dispatcher=None))  # sets up without waiting
    with stopped(breakable.replica_for(engine.keys.queue_key("default", "index"))):
        more = [plain.claim(plain.submit("quick", {}, owner="alice").id, "w1") for _ in range(2)]
        wait_for_server_time(rp, max(engine.get(lease.task_id).lease_deadline for lease in more) * 1000)
        with pytest.raises(ReplicationTimeout, match="pipeline of 2 scripts"):
            durable(breakable, timeout=TIMEOUT).sweep()


def test_a_flushed_script_cache_is_reloaded_and_the_write_still_waits(setup):
    engine = durable(setup)
    key = engine.keys.queue_key("default", "index")
    forget_lua(setup.primary_for(key).client())  # as after a restart that lost them: the call finds none
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    assert setup.replica_reader(key).hget(engine.keys.task(task.id).task, "status") == b"PENDING"
    assert engine.get(task.id).attempt == 0 and len(engine.history(task.id)) == 1  # ran once


def acked_all(primary) -> None:
    """Until the primary's replica has acknowledged every write made so far (it acks each second)."""
    offset = primary.info("replication")["master_repl_offset"]
    wait_until(lambda: primary.info("replication")["slave0"]["offset"] >= offset, what="the replica's ack")


def test_a_replayed_submit_waits_for_the_write_it_replays(breakable):
    """A resent submit (its idempotency key: the first try raised ReplicationTimeout) writes nothing
    new, from another connection whose own last write the replica has. WAIT counts what its own
    connection wrote; the replay must still not be acknowledged while the replica lacks the task
    (Redis 7 counts the script call itself: EVALSHA moves the connection's offset to the current one)."""
    engine, other = durable(breakable, timeout=TIMEOUT), durable(breakable, timeout=TIMEOUT)
    with contextlib.suppress(ReplicationTimeout):  # TIMEOUT may be short for a loaded machine's ACK
        other.submit("render", {"prompt": "before"}, owner="bob")  # another process, whose last write ...
    key = engine.keys.queue_key("default", "index")
    acked_all(breakable.primary_for(key).client())  # ... the replica has acknowledged
    with stopped(breakable.replica_for(key)):
        with pytest.raises(ReplicationTimeout):
            engine.submit("render", {"prompt": "p"}, owner="alice", idempotency_key="k1")
        with pytest.raises(ReplicationTimeout) as err:  # resent by another process (or thread)
            other.submit("render", {"prompt": "p"}, owner="alice", idempotency_key="k1")
        assert err.value.acked == 0
    replayed = durable(breakable).submit("render", {"prompt": "p"}, owner="alice", idempotency_key="k1")
    assert replayed.replayed
    rr = breakable.replica_reader(key)
    assert rr.hget(engine.keys.task(replayed.id).task, "status") == b"PENDING"  # on the replica now


def test_a_repeated_cancel_waits_for_the_cancel_it_repeats(breakable):
    """Any repeat answered REPLAYED (here a cancel of a task another process cancelled) is
    acknowledged only once the replica has the write it repeats. Redis 7.2 and later (Valkey too)
    move a connection's WAIT offset only by a call that writes: a repeat that wrote nothing was
    acknowledged at once (make check-valkey runs this file on Valkey 8)."""
    engine, other = durable(breakable, timeout=TIMEOUT), durable(breakable, timeout=TIMEOUT)
    task = durable(breakable).submit("render", {"prompt": "p"}, owner="alice")
    with contextlib.suppress(ReplicationTimeout):  # TIMEOUT may be short for a loaded machine's ACK
        other.submit("render", {"prompt": "before"}, owner="bob")  # other's last write ...
    key = engine.keys.task(task.id).task
    acked_all(breakable.primary_for(key).client())  # ... the replica has acknowledged
    with stopped(breakable.replica_for(key)):
        with pytest.raises(ReplicationTimeout):
            engine.cancel(task.id, by="alice")
        with pytest.raises(ReplicationTimeout) as err:  # the user's second click, on another web process
            other.cancel(task.id, by="alice")
        assert err.value.acked == 0
    assert breakable.replica_reader(key).hget(key, "status") == b"CANCELLED"  # on the replica now


def test_a_heartbeat_waits_out_its_wait_timeout_even_when_it_exceeds_a_third_of_the_lease(breakable):
    """A heartbeat's socket timeout is a third of its lease; with a longer wait_timeout the WAIT
    itself was cut off as a socket timeout (a failed heartbeat) instead of answering
    ReplicationTimeout (the renewal happened on the primary)."""
    patient, engine = durable(breakable), durable(breakable, timeout=TIMEOUT)
    for e in (patient, engine):
        e.task(name="brief-lease", queue="default", lease=0.6)(lambda ctx: None)  # a third: 0.2 s < 0.3 s
    lease = patient.claim(patient.submit("brief-lease", {}, owner="alice").id, "w1")
    with stopped(breakable.replica_for(engine.keys.task(lease.task_id).task)), pytest.raises(ReplicationTimeout) as err:
        engine.heartbeat(lease)
    assert (err.value.verb, err.value.acked) == ("heartbeat", 0)
