"""What the dashboard shows, read from the engine's counters, streams and RQ's registry.

The owner-independent part (counts, throughput, workers, breakers, draining queues) is
cached per app for ``GHOSTLESS_DASHBOARD_CACHE`` seconds (default 1), so many open
dashboards refreshing on every event cost one read of it per second. Stuck tasks and recent
events are per caller: a user sees only their own tasks (aggregate counts name no task); an admin sees all.
"""

from __future__ import annotations

import threading
import time

from ghostless.core.clock import server_ms
from ghostless.core.states import State
from ghostless.core.streams import parse_stream_id, stream_event

from . import charts, queries as wq
from .friendly import duration

STATES = [s.value for s in State]
TERMINAL = [s.value for s in State if s.terminal]
MINUTES = 15


class SharedCache:
    """The owner-independent dashboard data of one app, kept ``ttl`` seconds."""

    def __init__(self, ttl: float):
        self.ttl, self._lock, self._data, self._until = ttl, threading.Lock(), None, 0.0

    def get(self, engine) -> dict:
        with self._lock:
            if self._data is not None and self._until > time.monotonic():
                return self._data
        data = read_shared(engine)
        with self._lock:
            self._data, self._until = data, time.monotonic() + self.ttl
        return data


def state_class(state: str) -> str:
    return "st-" + state.lower().replace("_", "-")


def read_shared(engine) -> dict:
    """Counts, throughput, workers, breakers, rate limits and draining queues."""
    return {
        "queues": engine.stats(),
        "throughput": wq.throughput(engine, MINUTES),
        "workers": wq.workers(engine),
        "breakers": engine.breakers(),
        "rate_limits": engine.rate_limits(),
        "draining": engine.draining(),
        "now": server_ms(engine.redis) / 1000,
    }


def gather(engine, cache: SharedCache, admin: bool, owner: str | None, stuck_after: float) -> dict:
    """Everything one render of the dashboard needs; ``owner`` None means every owner's tasks."""
    data = dict(cache.get(engine))
    queues = data["queues"]
    data["count_charts"] = {
        q: charts.bars([(s.replace("_", " ").lower(), st["counts"][s], state_class(s)) for s in STATES])
        for q, st in queues.items()
    }
    data["throughput_chart"] = _throughput_chart(data["throughput"])
    data["time_in_state"] = _time_table(queues, "time_in_state", STATES)
    data["time_in_stage"] = _time_table(queues, "time_in_stage", None)
    data["failures"] = sorted(
        ((q, kind, n) for q, st in queues.items() for kind, n in st["failures"].items()), key=lambda row: -row[2]
    )
    data["stuck"] = wq.stuck_tasks(engine, stuck_after, owner=owner, limit=20)
    data["events"] = recent_events(engine, owner, 30)
    data["totals"] = {s: sum(st["counts"][s] for st in queues.values()) for s in STATES}
    if not admin:  # a worker's current job names a task that may be another user's
        data["workers"] = [{**w, "current_job": "busy" if w.get("current_job") else None} for w in data["workers"]]
    return data


def _throughput_chart(throughput: dict) -> dict:
    minutes = len(next(iter(throughput.values()), [])) or MINUTES + 1
    series = []
    for state in TERMINAL:
        values = (
            [sum(rows[i][state] for rows in throughput.values()) for i in range(minutes)]
            if throughput
            else [0] * minutes
        )
        series.append((state.lower(), state_class(state), values))
    labels = [f"-{minutes - 1 - i}m" if i < minutes - 1 else "now" for i in range(minutes)]
    return charts.lines(labels, series)


def _time_table(queues: dict, field: str, order: list[str] | None) -> dict:
    """{"columns": names, "rows": [(queue, [text per column])]} of mean seconds."""
    names = {n for st in queues.values() for n in st[field]}
    columns = [n for n in order if n in names] if order else sorted(names)
    rows = [(q, [duration(st[field][c]) if c in st[field] else "-" for c in columns]) for q, st in queues.items()]
    return {"columns": columns, "rows": [r for r in rows if any(v != "-" for v in r[1])]}


def recent_events(engine, owner: str | None, limit: int, scan: int = 200) -> list[dict]:
    """The newest ``limit`` events of ``owner``'s tasks (all with None) among the newest ``scan``
    of each queue's stream, newest first."""
    pipe = engine.redis.pipeline(transaction=False)
    queues = engine.queues()
    for q in queues:
        pipe.xrevrange(engine.keys.queue_key(q, "events"), count=scan)
    found = []
    for q, rows in zip(queues, pipe.execute()):
        for sid, fields in rows:
            ev = stream_event(q, sid, fields)
            if owner is None or ev["owner"] == owner:
                found.append(ev)
    found.sort(key=lambda ev: parse_stream_id(ev["stream_id"]), reverse=True)
    return found[:limit]


def event_text(ev: dict) -> str:
    """One feed line's words (static/app.js ``eventText`` says the same for live events)."""
    kind = ev.get("kind", "")
    if kind == "transition":
        text = f"{ev.get('from') or 'new'} → {ev.get('to')}"
        return text + (f": {ev['reason']}" if ev.get("reason") else "")
    if kind == "stage":
        return f"stage {ev.get('stage', '')}"
    if kind == "progress":
        pct = ev.get("progress")
        pct = f"{pct:.0%}" if isinstance(pct, float) else ""
        return f"progress {pct} {ev.get('message', '')}".strip()
    if kind == "stale":
        return f"refused a stale {ev.get('verb', 'call')} from {ev.get('worker') or 'a worker'}"
    if kind == "breaker":
        return f"breaker {ev.get('upstream', '')} {ev.get('state', '')}"
    return kind
