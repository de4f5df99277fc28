"""Priorities and the place in line: higher priority first (strictly), FIFO within a priority."""

import pytest

from ghostless import State
from tests.support.fakes import FakeDispatcher
from tests.support.snapshots import sibling


@pytest.fixture
def dispatching(engine):
    return sibling(engine, dispatcher=FakeDispatcher())


def test_position_counts_the_tasks_that_start_before_it(dispatching):
    low = [dispatching.submit("render", {"i": i}, owner="alice", priority=0).id for i in range(3)]
    high = dispatching.submit("render", {}, owner="bob", priority=5).id
    lowest = dispatching.submit("render", {}, owner="carol", priority=-2).id
    positions = {t.id: t.position for t in dispatching.get_many(low + [high, lowest])}
    assert positions == {high: 0, low[0]: 1, low[1]: 2, low[2]: 3, lowest: 4}


def test_position_moves_up_as_tasks_ahead_start_or_leave(dispatching):
    a, b, c = (dispatching.submit("render", {"i": i}, owner="alice").id for i in range(3))
    dispatching.claim(a, "w1")
    dispatching.cancel(b, by="alice")
    assert dispatching.get(c).position == 0
    assert dispatching.get(a).position is None and dispatching.get(b).position is None
    assert dispatching.check() == []


def test_a_redispatched_task_goes_to_the_back_of_its_priority(dispatching):
    a, b = (dispatching.submit("render", {"i": i}, owner="alice").id for i in range(2))
    dispatching.dispatch(a)  # QUEUED -> QUEUED: a new job at the back of RQ's list
    assert [dispatching.get(t).position for t in (a, b)] == [1, 0]


def test_tasks_not_yet_dispatched_have_no_position(engine):
    task = engine.submit("render", {}, owner="alice")  # no executor: PENDING
    assert engine.get(task.id).status == State.PENDING and engine.get(task.id).position is None


@pytest.mark.parametrize("priority", [11, -11, 2.5, "1", True, None])
def test_priority_outside_the_levels_is_a_value_error(engine, priority):
    with pytest.raises(ValueError, match="priority"):
        engine.submit("render", {}, owner="alice", priority=priority)
