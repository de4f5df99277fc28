"""The sweeper's dispatches (engine/core/sweep.py, lua/dispatch.lua): one dispatch per due task however
many sweepers race; a job known lost is looked at again within seconds; a task returning from a
lost attempt goes to the head of its priority's line."""

import redis

from ghostless import Code, Config, State
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import raw_task, sibling, snapshot
from tests.support.wait import server_ms, wait_for_server_time

SHORT = Config(dispatch_grace=0.05)


class SlowExecutor(FakeDispatcher):
    """Makes its jobs only on ``flush()``: a sweeper between recording a dispatch and its enqueue."""

    def __init__(self):
        super().__init__()
        self.pending = []

    def enqueue(self, *args, **kw):
        self.pending.append((args, kw))

    def flush(self):
        for args, kw in self.pending:
            super().enqueue(*args, **kw)
        self.pending = []


def dispatch_moves(engine, task_id):
    return [(e.from_, e.to) for e in engine.history(task_id) if e.verb == "dispatch"]


def due_tasks(engine, n=5):
    """n PENDING tasks whose (submit) delay has passed: due in the dispatch set."""
    tasks = [engine.submit("render", {"prompt": f"p{i}"}, owner="alice", delay=0.05) for i in range(n)]
    wait_for_server_time(engine.redis, server_ms(engine.redis) + 60)
    return tasks


# -- item: one dispatch per due task -------------------------------------------------------------


def test_two_sweepers_racing_over_the_same_due_tasks_dispatch_each_task_once(engine):
    executor = SlowExecutor()
    first, second = sibling(engine, dispatcher=executor), sibling(engine, dispatcher=executor)
    tasks = due_tasks(first)
    due = first.scripts.due

    def due_then_the_other_sweeper(*args, **kw):
        seen = due(*args, **kw)  # the first sweeper has read what is due...
        second.sweep()  # ...the second dispatches it all (its jobs not made yet) before it acts
        return seen

    first.scripts.due = due_then_the_other_sweeper
    report = first.sweep()
    executor.flush()
    assert report.dispatched == 0
    for task in tasks:
        assert dispatch_moves(first, task.id) == [("PENDING", "QUEUED")]
        assert raw_task(first, task.id)["dispatch_id"] in executor.jobs
    assert len(executor.enqueued) == len(tasks)
    assert first.check() == []


def test_a_sweeper_dispatch_at_a_score_the_task_no_longer_has_is_not_due_and_changes_nothing(engine):
    dispatching = sibling(engine, dispatcher=FakeDispatcher())
    [task] = due_tasks(dispatching, 1)
    k = dispatching.keys.task(task.id)
    seen = dispatching.redis.zscore(k.dispatch, task.id)
    before = snapshot(dispatching, task.id)
    reply = dispatching.scripts.dispatch(
        k, dispatching.keys.queue_key("images", "control"), task.id, "d-2", 300_000, seen_score=seen - 1
    )
    assert reply == [Code.NOT_DUE]
    assert snapshot(dispatching, task.id) == before
    reply = dispatching.scripts.dispatch(
        k, dispatching.keys.queue_key("images", "control"), task.id, "d-2", 300_000, seen_score=seen
    )
    assert reply[0] == Code.OK


# -- item: a job known lost is looked at again within seconds ------------------------------------


class RefusingExecutor(FakeDispatcher):
    def enqueue(self, *a, **kw):
        raise redis.ConnectionError("executor unreachable")


def test_a_failed_enqueue_brings_the_sweepers_next_look_within_dispatch_grace(engine):
    failing = sibling(engine, config=SHORT, dispatcher=RefusingExecutor())
    task = failing.submit("render", {"prompt": "a cat"}, owner="alice", delay=0.05)
    wait_for_server_time(failing.redis, server_ms(failing.redis) + 60)
    try:
        failing.sweep()
    except redis.ConnectionError:
        pass  # the sweeper loop logs it and ticks again
    k = failing.keys.task(task.id)
    assert raw_task(failing, task.id)["status"] == "QUEUED"  # recorded, but its job was never made
    assert failing.redis.zscore(k.dispatch, task.id) <= server_ms(failing.redis) + 50  # not requeue_after
    wait_for_server_time(failing.redis, failing.redis.zscore(k.dispatch, task.id))
    executor = FakeDispatcher()
    assert sibling(engine, config=SHORT, dispatcher=executor).sweep().dispatched == 1
    assert raw_task(failing, task.id)["dispatch_id"] in executor.jobs
    assert dispatch_moves(failing, task.id) == [("PENDING", "QUEUED"), ("QUEUED", "QUEUED")]


def test_a_claim_that_fails_for_a_redis_reason_reports_its_job_lost(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, config=SHORT, dispatcher=executor)
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice")
    [dispatch_id] = executor.dispatches(task.id)
    k = dispatching.keys.task(task.id)
    assert dispatching.redis.zscore(k.dispatch, task.id) > server_ms(dispatching.redis) + 200_000
    claim = dispatching.scripts.claim

    def stalled(*a, **kw):
        raise redis.TimeoutError("Timeout reading from socket")

    dispatching.scripts.claim = stalled
    try:
        dispatching.claim(task.id, "w1", dispatch_id=dispatch_id)
    except redis.TimeoutError:
        pass
    dispatching.scripts.claim = claim
    assert dispatching.redis.zscore(k.dispatch, task.id) <= server_ms(dispatching.redis) + 50
    executor.lose(dispatch_id)
    wait_for_server_time(dispatching.redis, dispatching.redis.zscore(k.dispatch, task.id))
    assert dispatching.sweep().dispatched == 1


def test_job_lost_for_a_dispatch_that_is_no_longer_current_changes_nothing(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice")
    old = executor.dispatches(task.id)[0]
    dispatching.dispatch(task.id)
    before = snapshot(dispatching, task.id)
    assert dispatching.job_lost(task.id, old) is False
    assert snapshot(dispatching, task.id) == before
    dispatching.claim(task.id, "w1")
    assert dispatching.job_lost(task.id, executor.dispatches(task.id)[-1]) is False


# -- item: a task that lost its worker runs next among its priority ------------------------------


def test_a_reclaimed_task_goes_to_the_head_of_its_priority_in_the_ready_line(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)
    lost = dispatching.submit("render", {"prompt": "lost"}, owner="alice")
    dispatching.claim(lost.id, "w1")
    waiting = [dispatching.submit("render", {"prompt": f"p{i}"}, owner="alice") for i in range(3)]
    high = dispatching.submit("render", {"prompt": "high"}, owner="alice", priority=2)
    assert dispatching.reclaim(lost.id, by="ops") == State.QUEUED
    line = [dispatching.get(t.id).position for t in [high, lost, *waiting]]
    assert line == [0, 1, 2, 3, 4]
    assert dispatching.check() == []


def test_a_lost_worker_or_a_release_returns_to_the_head_but_a_retry_after_backoff_does_not(engine):
    executor = FakeDispatcher()
    dispatching = sibling(engine, dispatcher=executor)
    queued = dispatching.submit("render", {"prompt": "queued"}, owner="alice")
    released = dispatching.submit("render", {"prompt": "released"}, owner="alice")
    crashed = dispatching.submit("render", {"prompt": "crashed"}, owner="alice")
    flaky = dispatching.submit("render", {"prompt": "flaky"}, owner="alice")
    dispatching.release(dispatching.claim(released.id, "w1"), "shutdown")
    dispatching.fail(dispatching.claim(crashed.id, "w2"), "worker_lost", "work-horse killed", retry_in=0)
    dispatching.fail(dispatching.claim(flaky.id, "w3"), "boom", "it broke")
    wait_for_server_time(dispatching.redis, float(raw_task(dispatching, flaky.id)["next_retry_at"]))
    dispatching.sweep()  # promotes and dispatches what is due
    for task in (released, crashed, flaky):
        if dispatching.get(task.id).status != State.QUEUED:
            dispatching.dispatch(task.id)
    positions = {dispatching.get(t.id).args["prompt"]: dispatching.get(t.id).position for t in (released, crashed)}
    assert sorted(positions.values()) == [0, 1]  # at the head, ahead of the task that was waiting
    assert dispatching.get(flaky.id).position == 3 and dispatching.get(queued.id).position == 2
    assert dispatching.check() == []


def test_a_lost_job_report_that_redis_refused_is_made_by_the_next_sweeper_tick(engine):
    executor = FakeDispatcher()
    # a grace the sweep's own steps do not outlast on a loaded host (its report re-arms the task)
    dispatching = sibling(engine, config=Config(dispatch_grace=1.0), dispatcher=executor)
    task = dispatching.submit("render", {"prompt": "a cat"}, owner="alice")
    [dispatch_id] = executor.dispatches(task.id)
    dispatch = dispatching.scripts.dispatch

    def full(*a, **kw):
        raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")

    dispatching.scripts.dispatch = full
    assert dispatching.job_lost(task.id, dispatch_id) is False
    dispatching.scripts.dispatch = dispatch  # memory freed
    k = dispatching.keys.task(task.id)
    assert dispatching.redis.zscore(k.dispatch, task.id) > server_ms(dispatching.redis) + 200_000
    dispatching.sweep()
    assert dispatching.redis.zscore(k.dispatch, task.id) <= server_ms(dispatching.redis) + 1000
    assert dispatching.report_lost_jobs() == 0
