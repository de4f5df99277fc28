"""One RQ queue per queue, priorities still strict (lua/claim.lua): a job's claim takes the head of
the queue's ready line when the head is of a higher priority or returns from a lost attempt; the
task passed over keeps its place in line and gets a job again at once, at the front of the queue."""

import pytest

from ghostless import Breaker, BreakerOpen, Code, Config, IllegalTransition, State, WrongDispatch
from ghostless.core.keys import TASK_OWN_KEYS
from ghostless.core.text import text
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


def test_a_resent_claim_that_took_the_head_gets_the_same_lease_and_the_task_passed_over(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    urgent = dispatching.submit("render", {}, owner="alice", priority=3).id
    [spent] = executor.dispatches(first)
    # The reply was lost before the engine dispatched the task passed over.
    lease = dispatching.claim(first, "w1", dispatch_id=spent, claim_id="c1", redispatch=False)
    again = dispatching.claim(first, "w1", dispatch_id=spent, claim_id="c1")
    assert lease.task_id == again.task_id == urgent and again.token == lease.token
    assert again.passed_over == first and dispatching.get(urgent).attempt == 1
    assert len(executor.dispatches(first)) == 2 and executor.line[0][0] == first  # the replay dispatched it
    assert dispatching.get(first).position == 0 and dispatching.check() == []


def test_a_task_passed_over_whose_worker_died_is_dispatched_by_the_sweeper_within_the_grace(engine, executor):
    dispatching = sibling(engine, config=Config(dispatch_grace=0.05), dispatcher=executor)
    first = dispatching.submit("render", {}, owner="alice").id
    second = dispatching.submit("render", {}, owner="alice").id
    dispatching.submit("render", {}, owner="alice", priority=3)
    [spent] = executor.dispatches(first)
    dispatching.claim(first, "w1", dispatch_id=spent, redispatch=False)  # the worker died then
    k = dispatching.keys.task(first)
    # the grace from the claim, not requeue_after (300 s): read after it, however long it took
    assert dispatching.redis.zscore(k.dispatch, first) <= server_ms(dispatching.redis) + 50
    dispatching.drain("images")  # while the queue drains, it waits like every task without a job
    wait_for_server_time(dispatching.redis, dispatching.redis.zscore(k.dispatch, first))
    dispatching.sweep()
    assert executor.dispatches(first) == [spent]
    dispatching.drain("images", draining=False)
    dispatching.sweep()  # its spent job still exists in RQ (it runs the head): not a waiting job
    again = executor.dispatches(first)[-1]
    assert again != spent and again in executor.at_front  # next, keeping its place
    assert [dispatching.get(t).position for t in (first, second)] == [0, 1] and dispatching.check() == []


def test_a_parent_finds_the_lease_its_horse_took_from_the_task_passed_over(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    urgent = dispatching.submit("render", {}, owner="alice", priority=3).id
    spent = executor.dispatches(first)[0]
    lease = dispatching.claim(first, "w1", dispatch_id=spent, claim_id="c1", redispatch=False)
    found = dispatching.lease_for_claim(first, "c1")  # the horse died before it noted what it took
    assert found is not None and (found.task_id, found.token) == (urgent, lease.token)
    assert dispatching.lease_for_claim(first, "c2") is None


def test_a_claim_starts_no_head_whose_timeout_is_longer_than_its_job_allows(engine, executor):
    dispatching = sibling(engine, dispatcher=executor)
    dispatching.task(name="film", queue="images", lease=30, timeout=3600)(lambda ctx: None)
    short = dispatching.submit("render", {}, owner="alice").id
    long = dispatching.submit("film", {}, owner="alice", priority=3).id
    # Every job of the queue allows the longest of its types: a job may start any of them.
    assert {executor.timeouts[d] for d in (*executor.dispatches(short), *executor.dispatches(long))} == {3600}
    render_timeout = dispatching.registry.get("render").timeout
    job = executor.dispatches(short)[0]
    assert dispatching.claim(short, "w1", dispatch_id=job, room=render_timeout).task_id == short
    assert dispatching.get(long).status == State.QUEUED and dispatching.check() == []


def test_a_last_try_takes_the_head_it_was_sent_and_moves_to_no_other(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    urgent = dispatching.submit("render", {}, owner="alice", priority=3).id
    other = dispatching.submit("render", {}, owner="alice", priority=2).id
    k, types, free = dispatching.keys.task(first), *dispatching._claim_types()
    spent = executor.dispatches(first)[0]

    def last_try(head, claim_id):
        keys = [getattr(dispatching.keys.task(head), f) for f in TASK_OWN_KEYS]
        args = (k, first, "w1", claim_id, spent, types)
        return dispatching.scripts.claim(*args, free=free, head=head, head_keys=keys, last_try=True)

    assert text(last_try(other, "c1")[8]) == first  # the head is urgent: no MOVED on a last try
    dispatching.release(dispatching.lease_for_claim(first, "c1"), "test")
    spent = executor.dispatches(first)[-1]
    reply = last_try(urgent, "c2")
    assert reply[0] == Code.OK and [text(v) for v in reply[8:10]] == [urgent, first]


def render_only(engine, executor):
    """An engine with every test type and one that runs only ``render``, on one executor."""
    only_render = sibling(engine, dispatcher=executor, types=False)
    only_render.task(name="render", queue="images", lease=30)(lambda ctx, **kw: None)
    return sibling(engine, dispatcher=executor), only_render


def with_paint(engine, executor):
    """The test engine with ``paint``, a type of the images queue behind a circuit breaker."""
    dispatching = sibling(engine, dispatcher=executor)
    breaker = Breaker(threshold=0.5, min_calls=2, window=60, cooldown=30)
    dispatching.task(name="paint", queue="images", lease=30, breaker=breaker, upstream="model")(lambda ctx: None)
    return dispatching


def test_a_worker_that_does_not_run_the_head_type_takes_the_task_of_its_job(engine, executor):
    both, only_render = render_only(engine, executor)
    mine = both.submit("render", {}, owner="alice").id
    other = both.submit("quick", {}, owner="alice", priority=3).id
    assert run_next(only_render, executor).task_id == mine  # quick is not run here
    assert run_next(both, executor).task_id == other
    assert both.check() == []


def test_a_head_behind_an_open_breaker_is_parked_and_the_task_passed_over_dispatched_again(engine, executor):
    dispatching = with_paint(engine, executor)
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


def test_a_head_of_a_type_with_a_breaker_is_taken_with_its_settings(engine, executor):
    guarded = with_paint(engine, executor)
    rendered = guarded.submit("render", {}, owner="alice").id
    painted = guarded.submit("paint", {}, owner="alice", priority=3).id
    assert guarded.claim(rendered, "w1", dispatch_id=executor.dispatches(rendered)[0]).task_id == painted
    assert guarded.get(painted).attempt == 1 and guarded.get(rendered).position == 0
    assert guarded.check() == []


def test_a_head_of_a_type_this_worker_does_not_run_is_passed_over_by_the_worker_of_its_queue(engine, executor):
    # A worker that runs only render takes the head, a render task, and gives the quick task
    # it passed over (a type it does not run) its job again.
    full, only_render = render_only(engine, executor)
    quick = full.submit("quick", {}, owner="alice").id
    urgent = full.submit("render", {}, owner="alice", priority=3).id
    assert run_next(only_render, executor).task_id == urgent
    assert executor.line[0][0] == quick and full.get(quick).position == 0 and full.check() == []


def test_a_claim_whose_head_changes_under_every_try_is_refused_and_changes_nothing(dispatching, executor):
    first = dispatching.submit("render", {}, owner="alice").id
    before = raw_task(dispatching, first)
    dispatching.scripts.claim = lambda *a, **kw: [Code.MOVED, first]  # a queue whose head keeps moving
    with pytest.raises(WrongDispatch):
        dispatching.claim(first, "w1", dispatch_id=executor.dispatches(first)[0])
    assert raw_task(dispatching, first) == before


def test_the_job_of_a_task_passed_over_by_a_worker_not_running_its_type_allows_its_own_timeout(engine, executor):
    full, only_render = render_only(engine, executor)
    full.task(name="film", queue="images", lease=30, timeout=3600)(lambda ctx: None)
    film = full.submit("film", {}, owner="alice").id
    urgent = full.submit("render", {}, owner="alice", priority=3).id
    assert run_next(only_render, executor).task_id == urgent
    again = executor.dispatches(film)[-1]  # made by a process that does not know film's timeout
    assert executor.timeouts[again] == 3600 and executor.line[0] == (film, again)


def test_a_claim_on_an_engine_without_executor_still_returns_the_head_it_took(engine, executor):
    web = sibling(engine, dispatcher=executor)
    worker = sibling(engine, dispatcher=None)
    low = web.submit("render", {}, owner="alice").id
    high = web.submit("render", {}, owner="alice", priority=5).id
    lease = worker.claim(low, "w1", dispatch_id=executor.dispatches(low)[0])
    assert (lease.task_id, lease.passed_over) == (high, low)  # the sweeper gives low its job again
    assert web.get(low).position == 0 and web.check() == []
