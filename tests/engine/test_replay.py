"""Every mutating script, called twice with identical KEYS and ARGV, has the effect of once.

A reply lost on the network is resent with the same arguments (the same claim id, fencing
token, dispatch id, new task id, retry id): the repeat must not act again. Each case lets the
Engine API build one script call (captured, not run), then runs it twice itself with
``engine.scripts._call``; a snapshot of every key the script may write (task keys, deadline
sets, queue counters, statistics, event stream length) after the first call must equal the
one after the second.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from ghostless import Code, Config, State
from ghostless.core.lua_source import SCRIPTS, call_keys
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import REPLAYED_STAT, claimed, purge_due_ms, raw_task, sibling, snapshot
from tests.support.wait import wait_for_server_time


class _Captured(Exception):
    pass


def capture(engine, script: str, action: Callable) -> tuple[list, list]:
    """The (keys, argv) the engine passes to ``script`` while doing ``action()``; the call is not run."""
    seen = []
    real = engine.scripts._call

    def spy(name, keys, args, client=None, via=None, extra=()):
        if name != script:
            return real(name, keys, args, client, via, extra)
        seen.append((call_keys(name, keys, extra), list(args)))
        raise _Captured

    engine.scripts._call = spy
    try:
        with pytest.raises(_Captured):
            action()
    finally:
        del engine.scripts._call
    return seen[0]


@dataclass
class Case:
    engine: object
    action: Callable  # an Engine call that runs the script once
    again: Code = Code.REPLAYED  # what the repeat answers
    moving: set = field(default_factory=set)  # hash fields a repeat may legitimately move forward
    # deadline-set scores a repeat may move forward (a replayed dispatch re-arms the job check)
    moving_scores: set = field(default_factory=set)
    counted: bool = True  # a REPLAYED repeat counts itself (not dispatch's: the sweeper's job check)


def case_submit(engine):
    # No idempotency key: the resent call must find its own task by id (tests/engine/test_submit.py
    # covers replays through an idempotency key).
    return Case(engine, lambda: engine.submit("render", {"prompt": "a cat"}, owner="alice"))


def case_dispatch(engine):
    task = engine.submit("render", {}, owner="alice")  # no executor: it stays PENDING
    executing = sibling(engine, dispatcher=FakeDispatcher())
    return Case(executing, lambda: executing.dispatch(task.id), moving_scores={"dispatch"}, counted=False)


def case_claim(engine):
    task = engine.submit("render", {}, owner="alice")
    return Case(engine, lambda: engine.claim(task.id, "w1"))


def case_heartbeat(engine):
    # A renewal is measured from the server time of the call, so a repeat may move the lease
    # deadline (hash field and lease score) forward; it answers OK (the script has no REPLAYED).
    task, lease = claimed(engine)
    # The first renewal must be able to move the deadline: let the server clock pass the claim's ms.
    wait_for_server_time(engine.redis, int(raw_task(engine, task.id)["started_at"]))
    return Case(engine, lambda: engine.heartbeat(lease), again=Code.OK, moving={"lease_until"})


def case_stage(engine):
    _, lease = claimed(engine)
    return Case(engine, lambda: engine.stage(lease, "generating"))


def case_progress(engine):
    _, lease = claimed(engine)
    return Case(engine, lambda: engine.progress(lease, 0.5, "half way"))


def case_checkpoint(engine):
    # Writing the same value under the same name again: the script has no REPLAYED, answers OK.
    _, lease = claimed(engine)
    return Case(engine, lambda: engine.checkpoint(lease, "page", {"n": 3}), again=Code.OK)


def case_complete(engine):
    _, lease = claimed(engine)
    return Case(engine, lambda: engine.complete(lease, {"url": "x"}))


def case_fail(engine):
    _, lease = claimed(engine)
    return Case(engine, lambda: engine.fail(lease, "boom", "broken"))


def case_release(engine):
    _, lease = claimed(engine)
    return Case(engine, lambda: engine.release(lease, "shutdown"))


def case_expire(engine):
    task, _ = claimed(engine, "quick")
    wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000)
    return Case(engine, engine.sweep, again=Code.NOT_DUE)


def case_promote(engine):
    task, lease = claimed(engine)
    engine.fail(lease, "boom")
    wait_for_server_time(engine.redis, int(raw_task(engine, task.id)["next_retry_at"]))
    return Case(engine, engine.sweep, again=Code.NOT_DUE)


def case_park(engine):
    task = engine.submit("render", {}, owner="alice")
    return Case(engine, lambda: engine.park(task.id, 5, "image-model"))


def case_overdue(engine):
    task = engine.submit("render", {}, owner="alice", due_in=0.01)
    wait_for_server_time(engine.redis, int(raw_task(engine, task.id)["due_at"]))
    return Case(engine, engine.sweep, again=Code.NOT_DUE)


def case_lapse(engine):
    task = engine.submit("render", {}, owner="alice", expires_in=0.01)
    wait_for_server_time(engine.redis, int(raw_task(engine, task.id)["expires_at"]))
    return Case(engine, engine.sweep, again=Code.NOT_DUE)


def case_resolve(engine):
    parent = engine.submit("render", {}, owner="alice")
    child = engine.submit("render", {}, owner="alice", depends_on=[parent.id])
    hook, engine.scripts.on_resolve = engine.scripts.on_resolve, None  # leave the child waiting
    engine.complete(engine.claim(parent.id, "w1"), {})
    engine.scripts.on_resolve = hook
    return Case(engine, lambda: engine.resolve(child.id), again=Code.NOT_DUE)


def case_cancel(engine):
    task = engine.submit("render", {}, owner="alice")
    return Case(engine, lambda: engine.cancel(task.id, by="alice", reason="stop"))


def case_edit(engine):
    task = engine.submit("render", {}, owner="alice")
    return Case(engine, lambda: engine.edit(task.id, {"prompt": "a dog"}, by="alice"))


def case_retry(engine):
    task, lease = claimed(engine)
    engine.fail(lease, "boom", retryable=False)
    return Case(engine, lambda: engine.retry(task.id, by="alice"))


def case_purge(engine):
    # The scripts read retention from ARGV[3], so the whole case runs on a short-retention engine.
    # The repeat finds no task: it answers NOT_FOUND (not NOT_DUE), with the same (no) effect.
    short = sibling(engine, config=Config(retention=0.05, idempotency_ttl=0.05))
    task, lease = claimed(short)
    short.complete(lease, {})
    wait_for_server_time(short.redis, purge_due_ms(short, task.id))
    return Case(short, short.sweep, again=Code.NOT_FOUND)


CASES = {name[len("case_") :]: fn for name, fn in globals().items() if name.startswith("case_")}


def test_every_mutating_script_has_a_replay_case():
    assert set(CASES) == set(SCRIPTS) - {"due", "read", "user"}  # these only read


def replays(engine, task_ids: list[str]) -> int:
    """The repeated calls counted in the queues of ``task_ids``."""
    stats = engine.stats()
    return sum(stats.get(q, {}).get(REPLAYED_STAT, 0) for q in {tid.split(".")[0] for tid in task_ids})


@pytest.mark.parametrize("script", sorted(CASES))
def test_script_called_twice_with_identical_arguments_has_the_effect_of_once(engine, script):
    case = CASES[script](engine)
    e = case.engine
    keys, argv = capture(e, script, case.action)
    tasks = [m.group(1) for k in keys if (m := re.search(r":task:([^:]+)$", k))]
    before = snapshot(e, *tasks)
    first = e.scripts._call(script, keys, argv)
    assert first[0] == Code.OK
    once = snapshot(e, *tasks)
    assert once != before  # the first call did act

    repeats = replays(e, tasks)
    again = e.scripts._call(script, keys, argv)
    assert again[0] == case.again
    # A repeat answered REPLAYED writes its own count, so that a WAIT after it covers the first
    # call's write (lib/record.lua replay); the snapshots leave that count out.
    assert replays(e, tasks) == repeats + (case.again == Code.REPLAYED and case.counted)
    twice = snapshot(e, *tasks)
    for task_id in tasks:
        for name in sorted(case.moving_scores):
            s1, s2 = once["tasks"][task_id]["sets"], twice["tasks"][task_id]["sets"]
            assert s2.pop(name) >= s1.pop(name)
        for name in sorted(case.moving):
            h1, h2 = once["tasks"][task_id]["hash"], twice["tasks"][task_id]["hash"]
            assert int(h2.pop(name)) >= int(h1.pop(name))
            if name == "lease_until":
                s1, s2 = once["tasks"][task_id]["sets"], twice["tasks"][task_id]["sets"]
                assert s2.pop("leases") >= s1.pop("leases")
    assert twice == once
    if case.again == Code.REPLAYED:  # the same answer again (submit and edit leave out the time)
        assert again[1:] == first[1 : len(again)]
    assert e.check() == []


def test_due_only_reads(engine):
    task, _ = claimed(engine, "quick")
    wait_for_server_time(engine.redis, engine.get(task.id).lease_deadline * 1000)
    k = engine.keys.task(task.id)
    before = snapshot(engine, task.id)
    first = engine.scripts._call("due", [k.leases, k.retries, k.expiry, k.dispatch, k.ended], [10, "1"])
    second = engine.scripts._call("due", [k.leases, k.retries, k.expiry, k.dispatch, k.ended], [10, "1"])
    assert first[2] == second[2] == [task.id]
    assert snapshot(engine, task.id) == before
    assert engine.get(task.id).status == State.PROCESSING
