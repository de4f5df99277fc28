"""Periodic tasks, exactly once per period.

``engine.periodic("nightly_report", cron="0 2 * * *", args={...}, owner="scheduler")``
registers a schedule in the engine's process memory: every process that loads the
app knows it, and ``ghostless scheduler`` fires it.

A period is the span from one cron occurrence to the next, in UTC. Each firing
submits the task with the idempotency key ``periodic:<name>:<period start ISO>``,
where the period start is computed from the cron expression and Redis ``TIME``
(never the local clock), so any number of schedulers, a restart or a manual
re-run create one task per period. A small hash per schedule
(``<ns>:periodic:<name>``: the last period fired and its task) keeps that true
after the idempotency key expires (Config.idempotency_ttl, 24 h by default, is
shorter than a weekly or monthly period).

Rules, as cron and Celery beat users expect:

- A schedule seen for the first time does not fire the period already under
  way: its first task is at its next occurrence (``fire`` runs one by hand).
- Periods that passed while no scheduler ran are not replayed: the latest one
  is fired, and the others are counted in a warning.
- A period that cannot exist (``0 2 31 * *`` in a 30-day month, 29 February in
  a common year) is skipped: cron never matches it, and the scheduler logs a
  warning naming the month when it computes the gap.
- A sixth field, last, gives seconds (croniter's convention: ``* * * * * */10``
  fires every ten seconds), for short periods and tests.

The scheduler process (engine/periodic/scheduler.py) calls ``fire_due`` once per tick.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from ghostless.core.clock import server_ms
from ghostless.core.engine import EXTENSIONS
from ghostless.core.errors import GhostlessError, IdempotencyConflict
from ghostless.core.text import text_or_none

log = logging.getLogger("ghostless.scheduler")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_MISSED_COUNT = 1000  # counting missed periods stops here (a per-second cron after a day down)
_US = timedelta(microseconds=1)


@dataclass(frozen=True)
class Schedule:
    """A periodic task: which type to submit, with what, and when (a UTC cron expression)."""

    name: str
    cron: str
    type: str
    args: dict = field(default_factory=dict)
    owner: str = "scheduler"
    priority: int = 0
    period_arg: str | None = None  # pass the period start (ISO) to the task under this argument name

    def period_start(self, now_ms: int) -> datetime | None:
        """The latest occurrence at or before ``now_ms`` (server time): the period under way."""
        try:
            return croniter(self.cron, _dt(now_ms) + _US).get_prev(datetime)
        except CroniterBadDateError:
            return None

    def next_after(self, at: datetime) -> datetime | None:
        try:
            return croniter(self.cron, at).get_next(datetime)
        except CroniterBadDateError:
            return None

    def idempotency_key(self, start: datetime) -> str:
        return f"periodic:{self.name}:{iso(start)}"

    def args_for(self, start: datetime) -> dict:
        return {**self.args, self.period_arg: iso(start)} if self.period_arg else dict(self.args)


@dataclass
class Firing:
    """What one schedule did at one tick."""

    schedule: str
    outcome: str  # fired | already_fired | not_due | first_seen | conflict
    period: str = ""  # ISO start of the period concerned
    task_id: str = ""


# -- registration ---------------------------------------------------------------------------------
def schedules(engine) -> dict[str, Schedule]:
    """The schedules registered on ``engine`` (in this process), by name."""
    return vars(engine).setdefault("_periodic_schedules", {})


def register(
    engine,
    name: str,
    *,
    cron: str,
    args: dict | None = None,
    owner: str = "scheduler",
    type: str | None = None,
    priority: int = 0,
    period_arg: str | None = None,
) -> Schedule:
    """Register a periodic task (``Engine.periodic``): ``type`` (default: ``name``) is submitted
    once per period of the UTC cron expression ``cron`` by ``ghostless scheduler``.

    Raises: ValueError (bad name, cron expression that is malformed or never matches a date,
    args not a JSON object, name taken), UnknownTaskType (register the task type first).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError("periodic name must be 1-64 letters, digits or . _ -")
    if name in schedules(engine):
        raise ValueError(f"periodic {name!r} is already registered")
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        raise ValueError(f"cron must have 5 fields (minute hour day month weekday) or 6 (+ seconds), got {cron!r}")
    try:
        croniter(cron, _dt(0)).get_next(datetime)
    except CroniterBadCronError as e:
        raise ValueError(f"cron {cron!r} is malformed: {e}") from None
    except CroniterBadDateError:
        raise ValueError(f"cron {cron!r} never matches a date that exists") from None
    tt = engine.registry.get(type or name)
    args = {} if args is None else args
    if period_arg is not None and (not isinstance(period_arg, str) or not period_arg.isidentifier()):
        raise ValueError("period_arg must be a Python identifier")
    # The checks submit makes (with the period's argument), at registration rather than at 2 a.m.
    engine._args_json({**args, period_arg: ""} if period_arg and isinstance(args, dict) else args, tt, None)
    schedule = Schedule(
        name=name, cron=cron, type=tt.name, args=dict(args), owner=owner, priority=priority, period_arg=period_arg
    )
    schedules(engine)[name] = schedule
    return schedule


# -- time (every period is computed from Redis TIME: server_ms) --------------------------------------
def _dt(ms_: int) -> datetime:
    return datetime.fromtimestamp(ms_ / 1000, tz=timezone.utc)


def _ms(dt: datetime) -> int:
    return round(dt.timestamp() * 1000)


def iso(dt: datetime) -> str:
    """UTC ISO 8601 to the second (milliseconds only when the cron has them: never)."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def skipped_months(cron: str, after: datetime, before: datetime) -> list[str]:
    """Months strictly between two consecutive occurrences that the cron's month field names
    but whose days it does not (``0 2 31 * *``: September). ``[]`` when none."""
    fields = croniter(cron, after).expanded
    days, months, weekdays = fields[2], fields[3], fields[4]
    if days == ["*"] or weekdays != ["*"] or not all(isinstance(d, int) for d in days):
        return []  # every day, a weekday rule (every month has each weekday) or 'L': none skipped
    out = []
    year, month = after.year, after.month
    while True:
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        if (year, month) >= (before.year, before.month):
            return out
        if months == ["*"] or month in months:
            out.append(f"{year:04d}-{month:02d} (no day {', '.join(map(str, sorted(days)))})")
            if len(out) >= 24:
                return out


def _missed(schedule: Schedule, last: datetime, start: datetime) -> int:
    """Occurrences strictly between ``last`` and ``start`` (capped)."""
    it = croniter(schedule.cron, last)
    n = 0
    while n < MAX_MISSED_COUNT:
        nxt = it.get_next(datetime)
        if nxt >= start:
            break
        n += 1
    return n


def _log_gap(schedule: Schedule, start: datetime) -> None:
    nxt = schedule.next_after(start)
    if nxt is None:
        log.warning("periodic %s: cron %r has no occurrence after %s", schedule.name, schedule.cron, iso(start))
        return
    for month in skipped_months(schedule.cron, start, nxt):
        log.warning(
            "periodic %s: period skipped in %s: cron %r names a day that month does not have; next period starts %s",
            schedule.name,
            month,
            schedule.cron,
            iso(nxt),
        )


# -- state ----------------------------------------------------------------------------------------
def _state_key(engine, name: str) -> str:
    return engine.keys.periodic_state(name)


def _state(engine, name: str) -> tuple[int, str] | None:
    raw = engine.redis.hgetall(_state_key(engine, name))
    if not raw:
        return None
    g = {text_or_none(k): text_or_none(v) for k, v in raw.items()}
    return int(g.get("period") or 0), g.get("task", "")


def _advance(engine, name: str, start_ms: int, task_id: str, now_ms: int) -> bool:
    """Record the period as fired (with its task), unless a later one (or this one, with a task)
    is recorded already. WATCH keeps two schedulers from moving it backwards."""
    key = _state_key(engine, name)

    def txn(pipe) -> bool:
        current = pipe.hmget(key, "period", "task")
        period = int(current[0] or -1)
        if (period, bool(current[1])) >= (start_ms, True):
            return False
        pipe.multi()
        pipe.hset(key, mapping={"period": start_ms, "task": task_id, "at": now_ms})
        return True

    return engine.redis.transaction(txn, key, value_from_callable=True)


# -- firing ---------------------------------------------------------------------------------------
def _submit(engine, schedule: Schedule, start: datetime) -> tuple[str, str]:
    """Submit the period's task: (task id, "fired" or "conflict")."""
    try:
        task = engine.submit(
            schedule.type,
            schedule.args_for(start),
            owner=schedule.owner,
            idempotency_key=schedule.idempotency_key(start),
            priority=schedule.priority,
        )
    except IdempotencyConflict as e:
        # Another deployment fired this period with other args: that task is the period's task.
        log.warning(
            "periodic %s: period %s already has task %s with other arguments (args changed "
            "within the period); not submitting again",
            schedule.name,
            iso(start),
            e.task_id,
        )
        return e.task_id, "conflict"
    return task.id, "fired"


def fire(engine, name: str, now_ms: int | None = None) -> Firing:
    """Fire the period under way now (by hand): its task is created once, whoever fires.

    Returns the Firing (``fired``, ``already_fired`` with the recorded task, or ``conflict``).
    Raises KeyError (no such schedule), ValueError (no period has started yet).
    """
    schedule = schedules(engine)[name]
    now_ms = server_ms(engine.redis) if now_ms is None else now_ms
    start = schedule.period_start(now_ms)
    if start is None:
        raise ValueError(f"periodic {name!r}: no period of {schedule.cron!r} has started yet")
    state = _state(engine, name)
    if state is not None and (state[0], bool(state[1])) >= (_ms(start), True):
        return Firing(name, "already_fired", iso(start), state[1] if state[0] == _ms(start) else "")
    task_id, outcome = _submit(engine, schedule, start)
    if _advance(engine, name, _ms(start), task_id, now_ms):
        log.info("periodic %s: period %s -> task %s (fired by hand)", name, iso(start), task_id)
    return Firing(name, outcome, iso(start), task_id)


def fire_due(engine, now_ms: int | None = None) -> list[Firing]:
    """One scheduler tick: fire every schedule whose current period has not been fired.

    Safe to run in any number of processes at once: the idempotency key makes the
    submits collapse into one task, and the state hash only moves forward.
    """
    now_ms = server_ms(engine.redis) if now_ms is None else now_ms
    out = []
    for schedule in schedules(engine).values():
        try:
            out.append(_fire_one(engine, schedule, now_ms))
        except GhostlessError as e:
            log.error("periodic %s: not fired: %s", schedule.name, e)
    return out


def _fire_one(engine, schedule: Schedule, now_ms: int) -> Firing:
    start = schedule.period_start(now_ms)
    start_ms = _ms(start) if start else 0
    state = _state(engine, schedule.name)
    if state is None:
        if engine.redis.hsetnx(_state_key(engine, schedule.name), "period", start_ms):
            nxt = schedule.next_after(_dt(now_ms))
            log.info(
                "periodic %s (%s): first seen; the period under way is not fired, the first starts %s",
                schedule.name,
                schedule.cron,
                iso(nxt) if nxt else "never",
            )
            if start is not None:
                _log_gap(schedule, start)
        return Firing(schedule.name, "first_seen", iso(start) if start else "")
    last_ms = state[0]
    if start is None or start_ms <= last_ms:
        return Firing(schedule.name, "not_due", iso(start) if start else "")
    if last_ms:
        missed = _missed(schedule, _dt(last_ms), start)
        if missed:
            log.warning(
                "periodic %s: %s%d period(s) between %s and %s passed without being fired (no "
                "scheduler ticked in time); only the latest is fired",
                schedule.name,
                "at least " if missed >= MAX_MISSED_COUNT else "",
                missed,
                iso(_dt(last_ms)),
                iso(start),
            )
    task_id, outcome = _submit(engine, schedule, start)
    if not _advance(engine, schedule.name, start_ms, task_id, now_ms):
        return Firing(schedule.name, "already_fired", iso(start), task_id)
    log.info("periodic %s: period %s -> task %s", schedule.name, iso(start), task_id)
    _log_gap(schedule, start)
    return Firing(schedule.name, outcome, iso(start), task_id)


def describe(engine, now_ms: int | None = None) -> list[dict]:
    """Each schedule with its current period, next period and last fired period (for the CLI)."""
    now_ms = server_ms(engine.redis) if now_ms is None else now_ms
    rows = []
    for s in schedules(engine).values():
        start, state = s.period_start(now_ms), _state(engine, s.name)
        nxt = s.next_after(_dt(now_ms))
        rows.append(
            {
                "name": s.name,
                "cron": s.cron,
                "type": s.type,
                "owner": s.owner,
                "current_period": iso(start) if start else None,
                "next_period": iso(nxt) if nxt else None,
                "last_fired": iso(_dt(state[0])) if state and state[1] else None,
                "last_task": state[1] if state and state[1] else None,
            }
        )
    return rows


EXTENSIONS["periodic"] = register  # Engine.periodic(...) (the core does not import this layer)
