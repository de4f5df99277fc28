"""Fencing that survives a failover rollback (issue 13, item 4).

Redis replicates asynchronously: a promoted replica may have missed the last claim. Its next
claim then counts to the same token again, while the worker of the lost claim still runs with
it. The lease is the pair (token, claim id), so that worker is refused (LeaseLost), never taken
for the new attempt's holder.

The rollback is simulated deterministically on one Redis: every key is DUMPed before the claim
and RESTOREd after it, as the promoted replica would have them. Two variants on real servers: a
replica promoted before the claim reached it, and a failover proper (replication link cut by a
proxy, the primary SIGKILLed with the claim unreplicated, the replica promoted).
"""

from __future__ import annotations

import pytest

from ghostless import Config, Engine, LeaseLost, ReplicationTimeout, State, TaskCancelled
from tests.conftest import register_test_types
from tests.support.proxy import CutProxy
from tests.support.replicas import attach, replicated_pair
from tests.support.snapshots import HOLDER_CALLS


def snapshot(r) -> dict:
    """Every key with its value (DUMP) and time to live: the data a replica would hold (on a
    cluster, every shard's)."""
    return {k: (r.dump(k), r.pttl(k)) for k in r.scan_iter("*")}


def roll_back(r, snap: dict) -> None:
    """Make the database what ``snap`` saw: later keys gone, the others as they were."""
    for k in list(r.scan_iter("*")):
        r.delete(k)
    for k, (dumped, pttl) in snap.items():
        r.restore(k, max(pttl, 0), dumped, replace=True)


def lost_claim(engine):
    """Worker A's lease from a claim a failover lost, and worker B's lease from the claim after."""
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    before = snapshot(engine.redis)
    a = engine.claim(task.id, "worker-a")
    roll_back(engine.redis, before)
    assert engine.get(task.id).status == State.PENDING  # the claim is gone, as on the replica
    b = engine.claim(task.id, "worker-b")
    assert b.token == a.token  # the premise: the counter issued the same token twice
    return task, a, b


@pytest.mark.parametrize("verb", sorted(HOLDER_CALLS))
def test_a_lease_from_a_lost_claim_is_refused_on_every_holder_call(engine, verb):
    task, a, b = lost_claim(engine)
    with pytest.raises(LeaseLost) as err:
        HOLDER_CALLS[verb](engine, a)
    assert type(err.value) is LeaseLost and err.value.token == a.token
    got = engine.get(task.id)
    assert (got.status, got.worker) == (State.PROCESSING, "worker-b")  # B's attempt untouched
    engine.heartbeat(b)
    assert engine.complete(b, {"by": "b"}) == State.SUCCESS
    assert engine.get(task.id).result == {"by": "b"}


def test_the_lost_claims_complete_after_the_new_one_completed_is_not_a_replay(engine):
    task, a, b = lost_claim(engine)
    engine.complete(b, {"by": "b"})
    for call in (lambda: engine.complete(a, {"by": "a"}), lambda: engine.heartbeat(a)):
        with pytest.raises(LeaseLost) as err:  # not REPLAYED, not AttemptEnded: A never held this
            call()
        assert type(err.value) is LeaseLost
    assert engine.get(task.id).result == {"by": "b"}


def test_the_lost_claim_is_refused_when_the_new_attempt_was_cancelled(engine):
    task, a, b = lost_claim(engine)
    engine.cancel(task.id, by="alice")
    with pytest.raises(LeaseLost) as err:
        engine.complete(a, {"by": "a"})
    assert type(err.value) is LeaseLost  # B's lease is the cancelled one, not A's
    with pytest.raises(TaskCancelled):
        engine.complete(b, {"by": "b"})
    assert engine.get(task.id).status == State.CANCELLED


def test_the_lease_of_a_claim_replayed_by_its_id_is_the_same_lease(engine):
    task = engine.submit("render", {"prompt": "p"}, owner="alice")
    first = engine.claim(task.id, "w", claim_id="c-1")
    again = engine.claim(task.id, "w", claim_id="c-1")
    assert (again.token, again.claim_id) == (first.token, "c-1")
    parent = engine.lease_for_claim(task.id, "c-1")  # as a worker's parent process rebuilds it
    assert parent is not None and (parent.token, parent.claim_id) == (first.token, "c-1")
    engine.heartbeat(parent)
    assert engine.complete(first) == State.SUCCESS


def test_a_promoted_replica_that_missed_the_claim_refuses_its_lease(private_redis):
    """Two real servers: the replica is promoted (REPLICAOF NO ONE) before the claim reaches it."""
    primary, replica = replicated_pair(private_redis)
    rp, rr = primary.client(), replica.client()
    old = register_test_types(Engine(rp, namespace="t", dispatcher=None))
    task = old.submit("render", {"prompt": "p"}, owner="alice")
    assert rp.wait(1, 5000) == 1  # the replica has the submit
    rr.replicaof("no", "one")  # the failover: promoted now, before the claim is replicated
    a = old.claim(task.id, "worker-a")  # acknowledged by the old primary only
    new = register_test_types(Engine(rr, namespace="t", dispatcher=None))
    assert new.get(task.id).status == State.PENDING
    b = new.claim(task.id, "worker-b")
    assert b.token == a.token
    with pytest.raises(LeaseLost):
        new.heartbeat(a)  # worker A, now pointed at the new primary
    with pytest.raises(LeaseLost):
        new.complete(a, {"by": "a"})
    assert new.complete(b, {"by": "b"}) == State.SUCCESS


def test_a_failover_that_lost_the_claim_refuses_the_old_workers_lease(private_redis):
    """A real failover: the replication link is cut (a proxy between primary and replica) before
    the claim, the primary is SIGKILLed with the claim unreplicated, the replica is promoted."""
    primary, replica = private_redis(), private_redis()
    proxy = CutProxy(primary.port)
    try:
        attach(replica, primary, port=proxy.port)
        rp, rr = primary.client(), replica.client()
        old = register_test_types(Engine(rp, namespace="t", dispatcher=None))
        task = old.submit("render", {"prompt": "p"}, owner="alice")
        assert rp.wait(1, 5000) == 1  # the replica has the submit
        proxy.cut()
        a = old.claim(task.id, "worker-a")  # acknowledged by the primary alone
        durable = Engine(rp, namespace="t", config=Config(wait_replicas=1, wait_timeout=0.2), dispatcher=None)
        with pytest.raises(ReplicationTimeout):  # what wait_replicas=1 would have told worker A
            durable.heartbeat(a)
        primary.kill()
    finally:
        proxy.close()  # the bytes held in the cut link are dropped
    rr.replicaof("no", "one")  # the failover
    new = register_test_types(Engine(rr, namespace="t", dispatcher=None))
    assert new.get(task.id).status == State.PENDING  # the claim was lost
    b = new.claim(task.id, "worker-b")
    assert b.token == a.token
    for call in (lambda: new.heartbeat(a), lambda: new.complete(a, {"by": "a"})):
        with pytest.raises(LeaseLost):  # worker A, reconnected to the new primary
            call()
    assert new.complete(b, {"by": "b"}) == State.SUCCESS
    assert new.get(task.id).result == {"by": "b"}
