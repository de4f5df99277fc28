"""A rate-limited upstream served by two real RQ workers and a sweeper: never more starts in any
window than the limit (start times from the histories, Redis time), parked tasks keep their
attempts and start when their slot opens."""

import pytest

from ghostless import Engine, State
from tests.apps import limited
from tests.support.procs import start_sweeper
from tests.support.wait import wait_until
from tests.worker.helpers import NS, OWNER

pytestmark = pytest.mark.slow
APP = "tests.apps.limited:engine"


def test_two_workers_never_start_more_attempts_in_a_window_than_the_limit(server, env, procs):
    engine = limited.register(Engine(server.client(), namespace=NS))
    procs.worker(app=APP)
    procs.worker("simple", app=APP)
    procs.started.append(start_sweeper(env, APP, interval=0.2))
    ids = [engine.submit("call_model", {}, owner=OWNER).id for _ in range(12)]

    wait_until(lambda: all(t.status.terminal for t in engine.get_many(ids)), timeout=60, what="every task ended")

    tasks = engine.get_many(ids)
    assert all((t.status, t.attempt, t.result) == (State.SUCCESS, 1, {"attempt": 1}) for t in tasks)
    starts = sorted(round(e.at * 1000) for tid in ids for e in engine.history(tid) if e.verb == "claim")
    period = round(limited.RATE.period * 1000)
    assert max(sum(1 for u in starts if t <= u < t + period) for t in starts) == limited.RATE.limit
    parked = [tid for tid in ids if any(e.reason == "rate_limited: model-api" for e in engine.history(tid))]
    assert len(parked) >= len(ids) - limited.RATE.limit  # all but the first few waited for a slot
    # 12 starts at 3 per half second: the last slots open 1.5 s after the first start, and the
    # parked tasks come back at their slots, not a poll later.
    assert starts[-1] - starts[0] < 1500 + 1000, starts
    assert engine.rate_limits()[0]["parked_total"] >= len(parked)
    assert engine.check() == []
