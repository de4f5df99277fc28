"""The chaos soak (tests/chaos/soak.py) through failovers, at CI size: fork workers SIGKILLed and
paused, a sweeper SIGKILLed and replaced, RQ jobs dropped between dequeue and claim, and a primary
SIGKILLed while tasks run -- on a real Redis Cluster (3 masters + 3 replicas: a replica promoted,
the old master restarted as a replica) and through Sentinel. ``make chaos-cluster`` runs them at
full size, with and without ``wait_replicas``, and prints what each lost.

Without ``wait_replicas`` a failover may lose writes the primary acknowledged and no replica had:
an acknowledged submit (the task is gone), claim (its token is issued again, to another claim), a
complete (the task runs again) or a cancel. What holds all the same, because each transition is one
script (its state, history entry, counters and deadline set written together) and a promoted replica
holds a prefix of its primary's writes, so every task it has is in a consistent earlier state:

- no task completed twice: the final record has at most one accepted completion, and the queue's
  ``entered:SUCCESS`` counter equals its SUCCESS tasks (a lost complete took its history entry and
  its counter with it);
- nothing stuck: a task rolled back to PENDING, QUEUED or PROCESSING is in the deadline set of that
  state, so the sweeper dispatches or reclaims it;
- no phantom success (each accepted outcome is one a worker produced under that very claim), no two
  runs of one claim (claim ids are random, so a token issued twice still names two claims);
- ``engine.check()`` finds nothing wrong.

With ``wait_replicas=1`` nothing acknowledged may be lost either: a call that raised
ReplicationTimeout or a connection error was not acknowledged, and the soak retries its submits
with their idempotency keys.
"""

from __future__ import annotations

import signal
import threading

import pytest
import redis

from ghostless import Config, Engine, RedisSetupError
from tests.chaos.backends import SentinelBackend
from tests.chaos.soak import Report, SoakConfig, run_soak
from tests.conftest import need_redis_cli, need_redis_server
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_until


def _short(**kw) -> SoakConfig:
    """A run of ~10 s of submissions with one failover once a third of the tasks ended."""
    settings = dict(tasks=150, restart_at=0.3, snatch_at=(0.3,), sweeper_kill_at=(0.5,), drain_timeout=60.0)
    return SoakConfig(verbose=False, **{**settings, **kw})


def _assert_holds_through_a_failover(report: Report) -> None:
    """What must hold with or without wait_replicas (module docstring)."""
    text = report.format()
    assert report.harness_errors == [], "\n".join([text, *report.harness_errors])  # in full: a pytest diff cuts them
    assert len(report.disruptions) == 1, text  # the failover happened, while tasks ran
    assert report.completed_twice == [] and report.success_counter_excess == 0, text
    assert report.stuck == [] and report.drained, text
    assert report.phantom_successes == [] and report.duplicate_executions == 0, text
    assert report.check == [], text


def _cluster_waits(cluster) -> bool:
    """Whether this build's engine takes wait_replicas on a cluster client."""
    client = cluster.client(socket_timeout=5)
    try:
        Engine(client, namespace="probe", config=Config(wait_replicas=1))
    except RedisSetupError:
        return False
    finally:
        client.close()
    return True


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_cluster_master_failover_under_chaos_completes_nothing_twice_and_leaves_nothing_stuck(redis_cluster):
    need_redis_cli()
    wait = _cluster_waits(redis_cluster)
    cfg = _short(backend="cluster", wait_replicas=1 if wait else 0)

    report = run_soak(cfg)

    print(report.format())  # shown with pytest -rA or -s: without wait, what the failover lost
    assert report.submitted == cfg.tasks
    _assert_holds_through_a_failover(report)
    if wait:
        assert report.problems() == [], report.format()  # nothing acknowledged lost either


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_sentinel_failover_with_wait_replicas_loses_nothing_acknowledged():
    """The replica is cut off for 0.3 s before the primary dies: without wait_replicas that loses the
    writes of those 0.3 s (``make chaos-cluster`` measures it); with it, none was acknowledged."""
    need_redis_server()
    cfg = _short(backend="sentinel", wait_replicas=1, lag=0.3, tasks=120)

    report = run_soak(cfg)

    print(report.format())
    assert report.submitted == cfg.tasks
    _assert_holds_through_a_failover(report)
    assert report.losses() == [], report.format()
    assert report.problems() == [], report.format()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_sentinel_harness_never_promotes_the_killed_primary_before_it_has_synced(monkeypatch):
    """The harness's failover: the new primary stalls (SIGSTOP, 3 s: a loaded host) just as the killed
    one comes back empty. Sentinel fails over again, and must not promote the empty node (seen in
    CI and make chaos-cluster as a second failover 1 s after the first: every task lost)."""
    need_redis_server()
    backend = SentinelBackend()
    backend.start()
    try:
        setup = backend.setup
        client = backend.client()
        client.set("kept", "1")
        assert client.wait(1, 5000) == 1
        start, timers = RedisServer.start, []

        def start_then_stall_the_new_primary(server, *args, **kwargs):
            started = start(server, *args, **kwargs)
            new = setup.replica if server is setup.primary else setup.primary
            new.proc.send_signal(signal.SIGSTOP)
            timers.append(threading.Timer(3.0, new.proc.send_signal, (signal.SIGCONT,)))
            timers[-1].start()
            return started

        monkeypatch.setattr(RedisServer, "start", start_then_stall_the_new_primary)
        try:
            backend.disrupt(0)
        finally:
            monkeypatch.undo()
            for timer in timers:
                timer.join()

        def kept():
            try:
                return backend.client().get("kept") == b"1"
            except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                return False

        wait_until(kept, 30, 0.1, what="the primary Sentinel names to hold what the first one acknowledged")
    finally:
        backend.close()
