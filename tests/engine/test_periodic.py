"""Periodic tasks (engine/periodic/schedules.py): one task per period, from Redis time, whoever fires."""

from __future__ import annotations

import itertools
import logging
import threading
from datetime import datetime, timezone

import fakeredis
import pytest

from ghostless import Engine, UnknownTaskType
from ghostless.periodic.schedules import fire, fire_due, schedules, skipped_months
from tests.conftest import register_test_types


def at(*parts) -> int:
    """Server time in ms for a UTC date (the tests hand fire_due the Redis clock reading)."""
    return int(datetime(*parts, tzinfo=timezone.utc).timestamp() * 1000)


def dt(*parts) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)


def tasks_of(engine, owner="scheduler"):
    return engine.list_tasks(owner=owner, limit=500)[0]


# -- registration ---------------------------------------------------------------------------------
def test_periodic_registers_a_schedule_on_the_engine(engine):
    schedule = engine.periodic("render", cron="0 2 * * *", args={"prompt": "nightly"})
    assert schedules(engine) == {"render": schedule}
    assert (schedule.type, schedule.owner, schedule.args) == ("render", "scheduler", {"prompt": "nightly"})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cron": "61 * * * *"}, "malformed"),
        ({"cron": "0 0 30 2 *"}, "never matches a date that exists"),
        ({"cron": "* * *"}, "5 fields"),
        ({"cron": "0 2 * * *", "args": [1]}, "args must be a JSON object"),
        ({"cron": "0 2 * * *", "period_arg": "not an identifier"}, "period_arg"),
    ],
)
def test_periodic_refuses_bad_schedules(engine, kwargs, message):
    with pytest.raises(ValueError, match=message):
        engine.periodic("nightly", type="render", **kwargs)
    assert schedules(engine) == {}


def test_periodic_needs_a_registered_type_and_a_free_name(engine):
    with pytest.raises(UnknownTaskType):
        engine.periodic("nightly_report", cron="0 2 * * *")
    engine.periodic("nightly", type="render", cron="0 2 * * *")
    with pytest.raises(ValueError, match="already registered"):
        engine.periodic("nightly", type="render", cron="0 3 * * *")


# -- firing ---------------------------------------------------------------------------------------
def test_first_sight_waits_for_the_next_period_then_fires_it_once(engine):
    engine.periodic("nightly", type="render", cron="0 2 * * *", args={"prompt": "p"}, period_arg="day")
    assert [f.outcome for f in fire_due(engine, at(2026, 3, 1, 15, 0))] == ["first_seen"]
    assert [f.outcome for f in fire_due(engine, at(2026, 3, 2, 1, 59, 59))] == ["not_due"]
    fired = fire_due(engine, at(2026, 3, 2, 2, 0, 0, 400))
    assert [(f.outcome, f.period) for f in fired] == [("fired", "2026-03-02T02:00:00Z")]
    assert [f.outcome for f in fire_due(engine, at(2026, 3, 2, 23, 0))] == ["not_due"]
    [task] = tasks_of(engine)
    assert task.id == fired[0].task_id
    assert task.idempotency_key == "periodic:nightly:2026-03-02T02:00:00Z"
    assert task.args == {"prompt": "p", "day": "2026-03-02T02:00:00Z"}


def test_two_schedulers_firing_at_the_same_instant_make_one_task(engine):
    """Each thread runs a whole tick at once (no lock): the idempotency key and the state
    hash's WATCH are what keep it to one task."""
    engine.periodic("nightly", type="render", cron="0 2 * * *")
    fire_due(engine, at(2026, 3, 1, 12))
    others = []
    for _ in range(4):
        other = register_test_types(Engine(engine.redis, namespace=engine.keys.ns, dispatcher=None))
        other.periodic("nightly", type="render", cron="0 2 * * *")
        others.append(other)
    barrier = threading.Barrier(len(others))
    results = []

    def tick(e):
        barrier.wait()
        results.extend(fire_due(e, at(2026, 3, 2, 2, 0, 1)))

    threads = [threading.Thread(target=tick, args=(e,)) for e in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 4 and len({r.task_id for r in results} - {""}) == 1
    assert "fired" in {r.outcome for r in results} <= {"fired", "already_fired", "not_due"}
    assert len(tasks_of(engine)) == 1


def test_a_manual_fire_and_a_restarted_scheduler_reuse_the_periods_task(engine):
    engine.periodic("nightly", type="render", cron="0 2 * * *")
    manual = fire(engine, "nightly", at(2026, 3, 2, 9, 0))  # by hand: the period under way
    assert (manual.outcome, manual.period) == ("fired", "2026-03-02T02:00:00Z")
    assert fire(engine, "nightly", at(2026, 3, 2, 10, 0)).task_id == manual.task_id
    restarted = register_test_types(Engine(engine.redis, namespace=engine.keys.ns, dispatcher=None))
    restarted.periodic("nightly", type="render", cron="0 2 * * *")
    assert [f.outcome for f in fire_due(restarted, at(2026, 3, 2, 11, 0))] == ["not_due"]
    assert len(tasks_of(engine)) == 1


def test_the_period_stays_fired_after_its_idempotency_key_expires(engine):
    """A weekly period outlives the 24 h idempotency key: the state hash still knows."""
    engine.periodic("weekly", type="render", cron="0 2 * * 1")
    fire_due(engine, at(2026, 3, 1, 12))
    first = fire_due(engine, at(2026, 3, 2, 2, 0, 1))[0]  # Monday
    for key in engine.redis.keys(f"{engine.keys.ns}:*idem:*"):
        engine.redis.delete(key)  # what the TTL does after 24 h
    assert fire(engine, "weekly", at(2026, 3, 5, 12)).outcome == "already_fired"
    assert [f.outcome for f in fire_due(engine, at(2026, 3, 6, 12))] == ["not_due"]
    assert [t.id for t in tasks_of(engine)] == [first.task_id]


def test_changed_args_within_a_period_keep_the_periods_first_task(engine, caplog):
    engine.periodic("nightly", type="render", cron="0 2 * * *", args={"prompt": "v1"})
    first = fire(engine, "nightly", at(2026, 3, 2, 3))
    redeployed = register_test_types(Engine(engine.redis, namespace=engine.keys.ns, dispatcher=None))
    redeployed.periodic("nightly", type="render", cron="0 2 * * *", args={"prompt": "v2"})
    engine.redis.delete(engine.keys.periodic_state("nightly"))  # as if the state were lost
    with caplog.at_level(logging.WARNING, logger="ghostless.scheduler"):
        again = fire(redeployed, "nightly", at(2026, 3, 2, 4))
    assert (again.outcome, again.task_id) == ("conflict", first.task_id)
    assert "args changed within the period" in caplog.text
    assert len(tasks_of(engine)) == 1


def test_missed_periods_fire_only_the_latest_and_are_counted(engine, caplog):
    engine.periodic("hourly", type="render", cron="0 * * * *")
    fire_due(engine, at(2026, 3, 2, 8, 30))
    with caplog.at_level(logging.WARNING, logger="ghostless.scheduler"):
        fired = fire_due(engine, at(2026, 3, 2, 12, 10))  # the scheduler was down from 8:30
    assert [(f.outcome, f.period) for f in fired] == [("fired", "2026-03-02T12:00:00Z")]
    assert "3 period(s) between 2026-03-02T08:00:00Z and 2026-03-02T12:00:00Z" in caplog.text
    assert len(tasks_of(engine)) == 1


def test_a_period_that_does_not_exist_is_skipped_and_logged(engine, caplog):
    """``0 2 31 * *``: September has no 31st. The gap is logged when August's period fires,
    and nothing is created until October 31."""
    engine.periodic("month_end", type="render", cron="0 2 31 * *")
    fire_due(engine, at(2025, 7, 31, 12))
    with caplog.at_level(logging.WARNING, logger="ghostless.scheduler"):
        august = fire_due(engine, at(2025, 8, 31, 2, 0, 5))
    assert [(f.outcome, f.period) for f in august] == [("fired", "2025-08-31T02:00:00Z")]
    assert "period skipped in 2025-09 (no day 31)" in caplog.text
    assert "next period starts 2025-10-31T02:00:00Z" in caplog.text
    for now in (at(2025, 9, 30, 2, 0, 5), at(2025, 10, 1, 2, 0, 5), at(2025, 10, 30, 23, 59)):
        assert [f.outcome for f in fire_due(engine, now)] == ["not_due"]
    october = fire_due(engine, at(2025, 10, 31, 2, 0, 5))
    assert [(f.outcome, f.period) for f in october] == [("fired", "2025-10-31T02:00:00Z")]
    assert sorted(t.idempotency_key for t in tasks_of(engine)) == [
        "periodic:month_end:2025-08-31T02:00:00Z",
        "periodic:month_end:2025-10-31T02:00:00Z",
    ]


def test_skipped_months_names_each_month_without_the_day():
    assert skipped_months("0 2 31 * *", dt(2025, 8, 31, 2), dt(2025, 10, 31, 2)) == ["2025-09 (no day 31)"]
    assert skipped_months("0 0 29 2 *", dt(2024, 2, 29), dt(2028, 2, 29)) == [
        "2025-02 (no day 29)",
        "2026-02 (no day 29)",
        "2027-02 (no day 29)",
    ]
    assert skipped_months("0 2 * * *", dt(2025, 8, 31, 2), dt(2025, 9, 1, 2)) == []
    assert skipped_months("0 2 31 * 1", dt(2025, 8, 31, 2), dt(2025, 9, 1, 2)) == []  # or Mondays


class SkewedClock(fakeredis.FakeRedis):
    """A Redis whose clock is three days ahead of this machine's."""

    def time(self):
        sec, usec = super().time()
        return int(sec) + 3 * 86400, usec


def test_the_period_comes_from_the_redis_clock_not_the_local_one():
    engine = register_test_types(Engine(SkewedClock(), namespace="skew", dispatcher=None))
    engine.periodic("daily", type="render", cron="0 0 * * *")
    fired = fire(engine, "daily")
    server_day = datetime.fromtimestamp(engine.redis.time()[0], tz=timezone.utc).strftime("%Y-%m-%d")
    local_day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert fired.period == f"{server_day}T00:00:00Z" != f"{local_day}T00:00:00Z"


def test_the_documented_seconds_example_fires_every_ten_seconds():
    import re
    from datetime import datetime, timezone
    from pathlib import Path

    from croniter import croniter

    line = next(
        ln
        for ln in (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text().splitlines()
        if "sixth field" in ln
    )
    example = re.search(r"`([^`]+)`", line).group(1)
    it = croniter(example, datetime(2026, 3, 2, 2, 0, 0, tzinfo=timezone.utc))
    times = [it.get_next(datetime) for _ in range(4)]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [10, 10, 10], example
