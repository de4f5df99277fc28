"""Heartbeat threads: kept for the next attempt of the same process (a simple worker runs
attempts one after another), never shared while one is still busy."""

import os
import threading

from ghostless import State
from ghostless.core.errors import AttemptEnded
from ghostless.core.models import Lease
from ghostless.execution.context import TaskContext
from ghostless.execution.heartbeat import Heartbeat, _Beater
from ghostless.execution.runner import execute
from tests.support.wait import wait_until


def beaters() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.name == "ghostless-heartbeat"}


def test_attempts_run_one_after_another_share_one_heartbeat_thread(engine):
    seen = []

    @engine.task(name="peek", queue="images", lease=30)
    def peek(ctx, n):
        seen.append(beaters())
        return {"n": n}

    for n in range(3):
        task = engine.submit("peek", {"n": n}, owner="alice")
        execute(engine, engine.claim(task.id, "w1"))
        assert engine.get(task.id).status == State.SUCCESS
    assert len(seen[0]) >= 1
    assert seen[1] == seen[2] == seen[0]  # no thread started for the later attempts


class BlockingEngine:
    """Stands in for the engine: its heartbeat blocks until released, like one to a hung Redis."""

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()
        self.beat_on: list[int] = []

    def heartbeat(self, lease):
        self.beat_on.append(threading.get_ident())
        self.entered.set()
        self.release.wait(10)
        return lease.lease


def attempt(engine, task_id: str) -> Heartbeat:
    lease = Lease(task_id=task_id, token=1, attempt=1, args={}, type="t", worker="w1", lease=0.03, max_attempts=1)
    return Heartbeat(engine, TaskContext(engine, lease), force_stop=lambda reason: None, grace=1.0)


def test_a_heartbeat_still_busy_is_not_given_the_next_attempt():
    engine = BlockingEngine()
    first = attempt(engine, "q.00000000000000000001")
    first.start()
    assert engine.entered.wait(5)  # the first attempt's thread is inside a heartbeat call
    first.stop()
    engine.entered.clear()

    second = attempt(engine, "q.00000000000000000002")
    second.start()
    engine.release.set()
    wait_until(lambda: len(set(engine.beat_on)) >= 2, 5, what="the second attempt's heartbeat")
    second.stop()
    assert engine.beat_on[0] != engine.beat_on[-1]  # a thread of its own, not the busy one


def test_a_forked_work_horse_starts_its_own_heartbeat_thread():
    engine = BlockingEngine()
    engine.release.set()  # beats return at once
    parent_hb = attempt(engine, "q.00000000000000000003")
    parent_hb.start()
    wait_until(lambda: engine.beat_on, 5, what="a heartbeat in the parent")
    parent_hb.stop()
    wait_until(lambda: _Beater._idle, 5, what="the parent's heartbeat thread to be idle")

    pid = os.fork()
    if pid == 0:  # the child: the parent's idle thread did not come along, so it must not be handed out
        code = 1
        try:
            engine.beat_on.clear()
            child_hb = attempt(engine, "q.00000000000000000004")
            child_hb.start()
            wait_until(lambda: engine.beat_on, 5, what="a heartbeat in the child")
            code = 0
        except AssertionError:
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # 3: the child's attempt got no heartbeat


class EndedEngine:
    """Stands in for the engine: every heartbeat arrives after its attempt reported its outcome."""

    def __init__(self):
        self.calls = 0

    def heartbeat(self, lease):
        self.calls += 1
        raise AttemptEnded(lease.task_id, lease.token, "SUCCESS")


def test_a_heartbeat_answered_by_its_own_ended_attempt_stops_beating_quietly(caplog):
    engine = EndedEngine()
    hb = attempt(engine, "q.00000000000000000005")
    hb.start()
    wait_until(lambda: engine.calls and hb._done.is_set(), 5, what="the heartbeat to stop")
    assert engine.calls == 1
    assert not hb.ctx.cancelled and not hb.lost  # not a lost lease: nothing to stop, nothing logged
    assert "lease lost" not in caplog.text
