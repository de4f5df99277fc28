"""submit.lua: creating tasks, idempotency keys, bad input."""

import pytest

from ghostless import IdempotencyConflict, State, UnknownTaskType


def test_submitted_task_waits_in_pending_in_the_dispatch_set(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    got = engine.get(task.id)
    assert got.status == State.PENDING and got.args == {"prompt": "a cat"} and got.owner == "alice"
    assert got.attempt == 0 and got.max_attempts == 3 and got.version == 1
    assert engine.redis.zscore(engine.keys.task(task.id).dispatch, task.id) is not None
    assert engine.check() == []


def test_submit_records_the_first_transition_in_history(engine):
    task = engine.submit("render", {"prompt": "a cat"}, owner="alice")
    [event] = engine.history(task.id)
    assert (event.from_, event.to, event.verb, event.by) == ("", "PENDING", "submit", "alice")


def test_same_idempotency_key_and_args_returns_the_existing_task(engine):
    first = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k")
    again = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k")
    assert again.id == first.id
    assert engine.stats()["images"]["counts"]["PENDING"] == 1


def test_a_repeated_call_is_counted_as_a_replay_and_changes_nothing_else(engine):
    """A repeat answered REPLAYED writes the count of repeats, so that a WAIT after it covers the
    write it repeats (tests/engine/test_durable.py); the task itself stays as the first call left it."""
    first = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k")
    engine.cancel(first.id, by="alice")
    task = engine.get(first.id)
    assert engine.stats()["images"]["replayed"] == 0
    assert engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k").id == first.id
    engine.cancel(first.id, by="alice")
    assert engine.stats()["images"]["replayed"] == 2
    assert engine.get(first.id) == task and len(engine.history(first.id)) == 2
    assert engine.check() == []


def test_same_idempotency_key_with_other_args_is_a_conflict(engine):
    first = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k")
    with pytest.raises(IdempotencyConflict) as err:
        engine.submit("render", {"prompt": "a dog"}, owner="alice", idempotency_key="k")
    assert err.value.task_id == first.id


def test_idempotency_keys_are_scoped_to_the_owner(engine):
    a = engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k")
    b = engine.submit("render", {"prompt": "a cat"}, owner="bob", idempotency_key="k")
    assert a.id != b.id


def test_idempotency_key_expires_after_its_ttl(engine):
    engine.submit("render", {"prompt": "a cat"}, owner="alice", idempotency_key="k")
    ttl = engine.redis.pttl(engine.keys.idempotency("images", "alice", "k"))
    assert 0 < ttl <= engine.config.idempotency_ttl * 1000


def test_delayed_task_is_due_for_dispatch_after_the_delay(engine):
    task = engine.submit("render", {"prompt": "x"}, owner="alice", delay=60)
    score = engine.redis.zscore(engine.keys.task(task.id).dispatch, task.id)
    assert score / 1000 == pytest.approx(task.created_at + 60, abs=0.01)


@pytest.mark.parametrize(
    "args, problem",
    [
        (["not", "an", "object"], "JSON object"),
        ({"x": object()}, "not JSON-serialisable"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ({"x": "y" * (1 << 20)}, "over the limit"),
    ],
)
def test_bad_args_are_a_value_error_naming_the_problem(engine, args, problem):
    with pytest.raises(ValueError, match=problem):
        engine.submit("render", args, owner="alice")
    assert engine.stats()["images"]["counts"]["PENDING"] == 0


def test_unknown_task_type_is_refused(engine):
    with pytest.raises(UnknownTaskType):
        engine.submit("mine_bitcoin", {}, owner="alice")


@pytest.mark.parametrize("owner", ["", "   ", None, 42])
def test_empty_or_missing_owner_is_a_value_error(engine, owner):
    with pytest.raises(ValueError, match="owner"):
        engine.submit("render", {}, owner=owner)


@pytest.mark.parametrize(
    "kw", [{"priority": "high"}, {"priority": True}, {"delay": -1}, {"delay": float("inf")}, {"idempotency_key": ""}]
)
def test_bad_options_are_value_errors(engine, kw):
    with pytest.raises(ValueError):
        engine.submit("render", {}, owner="alice", **kw)


def test_the_task_submit_returns_carries_its_due_times_as_get_reads_them(engine):
    task = engine.submit("render", {}, owner="alice", due_in=60, escalate_in=120)
    got = engine.get(task.id)
    assert (task.due_at, task.escalate_at) == (got.due_at, got.escalate_at) and task.due_at
    assert (task.status, task.version, task.waiting, task.notify_url) == (got.status, got.version, False, "")
