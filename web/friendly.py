"""Words for people: what a task is doing, in one line and a few details.

Used by the server-rendered pages (the task page's status panel, the task list); the
browser re-fetches the rendered panel on each event, so this is the only place the text
is written.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from ghostless.core.models import Task
from ghostless.core.states import State


@dataclass
class Status:
    headline: str
    tone: str  # ok | info | wait | warn | bad  (a CSS class)
    details: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)  # overdue, escalated, paused queue


# Bidirectional controls: embeddings and overrides (U+202A-U+202E), isolates (U+2066-U+2069) and
# the LRM/RLM/ALM marks. One U+202E in a task's reason reverses the rest of the line it is shown
# in (a timeline, a feed), so text can pose as something else. Stripped where text is shown (the
# pages' every {{ value }}, and app.js), never in stored data or the JSON API.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_NO_BIDI = dict.fromkeys(map(ord, BIDI_CONTROLS))


def without_bidi(value):
    """``value`` without bidi control characters (a str or Markup; anything else as is): the
    templates' finalize, so no page shows one whatever the source of the text."""
    return value.translate(_NO_BIDI) if isinstance(value, str) else value


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def duration(seconds: float | None) -> str:
    """A rough, readable span: ``0.4 s``, ``12 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if seconds is None:
        return "-"
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def iso(at: float | None) -> str:
    """Machine-readable UTC time for ``<time datetime=...>`` ("" when unknown)."""
    if not at:
        return ""
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock(at: float | None) -> str:
    """``YYYY-MM-DD HH:MM:SS UTC``: the text the browser replaces with local time."""
    if not at:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def stage_label(stage: str) -> str:
    return stage.replace("_", " ").replace("-", " ").strip().capitalize() if stage else ""


# A task parked before it started (lua/park.lua), by its error kind: it waits, no attempt used.
PARKED = {
    "rate_limited": "Waiting for its turn at {upstream} (rate limit)",
    "upstream_open": "Waiting: {upstream} is failing (circuit breaker open)",
}


def _why(task: Task) -> str:
    return task.reason or task.error_kind or "no reason recorded"


def describe(task: Task, now: float, draining: bool = False) -> Status:
    """The task's state as a person would say it.

    ``now`` is the Redis server time (s): every time on a task comes from that clock.
    """
    s, attempts = task.status, f"{task.attempt} of {task.max_attempts}"
    if s == State.PENDING:
        status = Status("Waiting to start", "wait")
        if task.attempt:
            status.details.append(f"attempt {task.attempt + 1} of {task.max_attempts} comes next")
    elif s == State.QUEUED:
        if task.position is None:
            status = Status("Queued: waiting for a worker", "wait")
        else:
            place = task.position + 1
            status = Status(f"You are {ordinal(place)} in line", "wait")
            status.details.append("next to start" if place == 1 else f"{task.position} ahead of you")
    elif s == State.PROCESSING:
        status = Status(stage_label(task.stage) or "Processing", "info")
        status.details.append(task.message or f"{task.progress:.0%} done")
        if task.attempt > 1:
            status.details.append(f"attempt {attempts}")
    elif s == State.RETRY_WAITING and task.error_kind in PARKED:  # it has not started: no retry
        status = Status(PARKED[task.error_kind].format(upstream=task.reason.partition(": ")[2]), "wait")
        if task.next_retry_at:
            wait = task.next_retry_at - now
            status.details.append(f"starts in {duration(wait)}" if wait > 0 else "starts any moment now")
    elif s == State.RETRY_WAITING:
        status = Status(f"Retrying ({task.attempt + 1} of {task.max_attempts}) after: {_why(task)}", "warn")
        if task.next_retry_at:
            wait = task.next_retry_at - now
            status.details.append(f"next try in {duration(wait)}" if wait > 0 else "next try any moment now")
    elif s == State.SUCCESS:
        status = Status("Done", "ok")
        if task.started_at and task.finished_at:
            status.details.append(
                f"took {duration(task.finished_at - task.started_at)}"
                + (f" over {task.attempt} attempts" if task.attempt > 1 else "")
            )
    elif s == State.FAILED:
        status = Status(f"Failed: {_why(task)}", "bad")
        status.details.append(f"after attempt {attempts}" + (f" ({task.error_kind})" if task.error_kind else ""))
    elif s == State.TIMEOUT:
        status = Status(f"Timed out: {_why(task)}", "bad")
        status.details.append(f"after attempt {attempts}")
    else:  # CANCELLED
        if task.superseded_by:
            status = Status("Replaced by an edit", "info")
        elif task.error_kind == "expired":
            status = Status("Expired: it did not start in time", "info")
        else:
            status = Status(f"Cancelled: {task.reason or 'no reason given'}", "info")
    if draining and s in (State.PENDING, State.QUEUED, State.RETRY_WAITING):
        status.alerts.append(f"The {task.queue} queue is paused (draining): new work waits until it resumes.")
    if not task.terminal:
        if task.expires_at:
            status.details.append(f"expires at {clock(task.expires_at)} unless it has started")
        if task.escalated_at:
            status.alerts.append(f"Escalated: overdue since {clock(task.due_at)} and still not finished.")
        elif task.overdue_at:
            status.alerts.append(f"Overdue: it should have finished by {clock(task.due_at)}.")
    return status
