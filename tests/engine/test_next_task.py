"""One RQ queue per queue, priorities still strict (lua/claim.lua): a job's claim takes the head of
the queue's ready line when the head is of a higher priority or returns from a lost attempt; the
task passed over keeps its place in line and gets a job again at once, at the front of the queue."""

import pytest

from ghostless import Breaker, BreakerOpen, Code, Config, IllegalTransition, State, WrongDispatch
from tests.support.snapshots import raw_task, sibling
from tests.support.wait import server_ms, wait_for_server_time


def run_next(engine, executor, worker="w1", claim_id=None):
    """The job RQ hands out next, claimed as a worker does: with its dispatch."""
    task_id, dispatch_id = executor.next_job()
    return engine.claim(task_id, worker, dispatch_id=dispatch_id, claim_id=claim_id)


def test_jobs_in_dispatch_order_start_tasks_in_priority_order(dispatching, executor):
    low = [dispatching.submit("render", {"i": i}, owner="alice").id for i in range(3)]
    high = dispatching.submit("render", {}, owner="bob", priority=5).id
    lowest = dispatching.submit("render", {}, owner="carol", priority=-2).id
    started = []
    while executor.line:
        try:
            started.append(run_next(dispatching, executor).task_id)
        except IllegalTransition:  # the job made for high, which a job ahead of it started
            pass
        assert dispatching.check() == []
    assert started == [high, *low, lowest]


def test_the_task_passed_over_keeps_its_place_and_gets_a_job_at_the_front(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    second = dispatching.submit("render", {}, owner="alice").id
    urgent = dispatching.submit("render", {}, owner="alice", priority=3).id
    [spent] = executor.dispatches(first)
    assert run_next(dispatching, executor).task_id == urgent
    again = executor.dispatches(first)[-1]
    assert again != spent and again in executor.at_front and executor.line[0] == (first, again)
    assert [dispatching.get(t).position for t in (first, second)] == [0, 1]
    assert raw_task(dispatching, first)["dispatch_id"] == again and "passed" not in raw_task(dispatching, first)
    assert dispatching.history(first)[-1].reason == "passed over"
    assert dispatching.check() == []


def test_tasks_of_one_priority_start_in_the_order_of_their_jobs(dispatching, executor):
    a, b = (dispatching.submit("render", {"i": i}, owner="alice").id for i in range(2))
    job_a, job_b = executor.next_job(), executor.next_job()
    assert dispatching.claim(job_b[0], "w2", dispatch_id=job_b[1]).task_id == b  # a worker raced ahead
    assert dispatching.claim(job_a[0], "w1", dispatch_id=job_a[1]).task_id == a
    assert executor.line == type(executor.line)()  # no task was passed over: no job made


def test_a_task_back_from_a_lost_attempt_is_started_by_the_next_job(dispatching, executor):
    waiting = [dispatching.submit("render", {"i": i}, owner="alice").id for i in range(2)]
    lost = dispatching.submit("render", {}, owner="alice").id
    executor.line.clear()
    dispatching.claim(lost, "w1")
    assert dispatching.reclaim(lost, by="ops") == State.QUEUED  # back at the head of its priority
    job = executor.dispatches(waiting[0])[0]
    assert dispatching.claim(waiting[0], "w2", dispatch_id=job).task_id == lost


def test_a_resent_claim_that_took_the_head_gets_the_same_lease(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    urgent = dispatching.submit("render", {}, owner="alice", priority=3).id
    [spent] = executor.dispatches(first)
    redispatch = dispatching._dispatch_passed
    dispatching._dispatch_passed = lambda *a: None  # the reply was lost before the engine went on
    lease = dispatching.claim(first, "w1", dispatch_id=spent, claim_id="c1")
    again = dispatching.claim(first, "w1", dispatch_id=spent, claim_id="c1")
    assert lease.task_id == again.task_id == urgent and again.token == lease.token
    assert dispatching.get(urgent).attempt == 1
    dispatching._dispatch_passed = redispatch
    dispatching._dispatch_passed(first, spent)
    assert dispatching.get(first).status == State.QUEUED and dispatching.check() == []


def test_a_task_passed_over_whose_worker_died_is_dispatched_by_the_sweeper_within_the_grace(engine, executor):
    dispatching = sibling(engine, config=Config(dispatch_grace=0.05), dispatcher=executor)
    first = dispatching.submit("render", {}, owner="alice").id
    dispatching.submit("render", {}, owner="alice", priority=3)
    [spent] = executor.dispatches(first)
    dispatching._dispatch_passed = lambda *a: None  # the worker died before it dispatched it again
    before = server_ms(dispatching.redis)
    dispatching.claim(first, "w1", dispatch_id=spent)
    k = dispatching.keys.task(first)
    assert dispatching.redis.zscore(k.dispatch, first) <= before + 50 + 100  # the grace, not requeue_after
    executor.lose(spent)  # its job ran: RQ no longer has it
    wait_for_server_time(dispatching.redis, dispatching.redis.zscore(k.dispatch, first))
    dispatching.sweep()
    assert len(executor.dispatches(first)) == 2 and dispatching.check() == []


def test_a_worker_that_does_not_run_the_head_type_takes_the_task_of_its_job(engine, executor):
    both = sibling(engine, dispatcher=executor)
    only_render = sibling(engine, dispatcher=executor, types=False)
    only_render.task(name="render", queue="images", lease=30)(lambda ctx, **kw: None)
    mine = both.submit("render", {}, owner="alice").id
    other = both.submit("quick", {}, owner="alice", priority=3).id
    assert run_next(only_render, executor).task_id == mine  # quick is not run here
    assert run_next(both, executor).task_id == other
    assert both.check() == []


def test_a_head_behind_an_open_breaker_is_parked_and_the_task_passed_over_dispatched_again(engine, executor):
    dispatching = sibling(engine, dispatcher=executor)
    breaker = Breaker(threshold=0.5, min_calls=2, window=60, cooldown=30)
    dispatching.task(name="paint", queue="images", lease=30, breaker=breaker, upstream="model")(lambda ctx: None)
    for _ in range(2):  # trip it
        task = dispatching.submit("paint", {}, owner="alice")
        dispatching.fail(dispatching.claim(task.id, "w1"), "Timeout", "slow")
    first = dispatching.submit("paint", {}, owner="alice").id
    urgent = dispatching.submit("paint", {}, owner="alice", priority=3).id
    with pytest.raises(BreakerOpen) as busy:
        dispatching.claim(first, "w1", dispatch_id=executor.dispatches(first)[0])
    assert busy.value.task_id == urgent  # the head was reached: the worker parks it
    dispatching.park(busy.value.task_id, busy.value.wait, busy.value.upstream, busy.value.kind)
    assert len(executor.dispatches(first)) == 2 and dispatching.get(first).status == State.QUEUED
    assert dispatching.check() == []


def test_a_head_of_a_type_with_other_limits_is_not_taken_without_its_settings(engine, executor):
    guarded = sibling(engine, dispatcher=executor)
    breaker = Breaker(threshold=0.5, min_calls=2, window=60, cooldown=30)
    guarded.task(name="paint", queue="images", lease=30, breaker=breaker, upstream="model")(lambda ctx: None)
    rendered = guarded.submit("render", {}, owner="alice").id
    painted = guarded.submit("paint", {}, owner="alice", priority=3).id
    assert guarded.claim(rendered, "w1", dispatch_id=executor.dispatches(rendered)[0]).task_id == rendered
    assert guarded.claim(painted, "w1", dispatch_id=executor.dispatches(painted)[0]).task_id == painted


def test_a_claim_whose_head_changes_under_every_try_is_refused_and_changes_nothing(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    before = raw_task(dispatching, first)
    dispatching.scripts.claim = lambda *a, **kw: [Code.MOVED, first]  # a queue whose head keeps moving
    with pytest.raises(WrongDispatch):
        dispatching.claim(first, "w1", dispatch_id=executor.dispatches(first)[0])
    assert raw_task(dispatching, first) == before
