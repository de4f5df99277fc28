"""Human-friendly text for the operator commands (engine/cli/ops.py): tables, one line per event.

Times are UTC from the Redis clock, to the millisecond.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from ghostless.core.models import Event, Task
from ghostless.core.states import State


def when(seconds: float | None) -> str:
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def table(headers: list[str], rows: list[list], right: set[int] = frozenset()) -> str:
    """Columns padded to their widest cell; columns in ``right`` are right-aligned (numbers)."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def task_table(tasks: list[Task]) -> str:
    """One line per task: id, status (stage while processing), type, owner, attempt, last change."""
    rows = [
        [
            t.id,
            t.status.value + (f" ({t.stage})" if t.status == State.PROCESSING and t.stage else ""),
            t.type,
            t.owner,
            f"{t.attempt}/{t.max_attempts}",
            when(t.updated_at),
        ]
        for t in tasks
    ]
    return table(["task", "status", "type", "owner", "attempt", "updated"], rows)


def task_block(task: Task) -> str:
    status = task.status.value
    if task.status == State.PROCESSING:
        status += f"  stage {task.stage or '-'}  progress {task.progress:.0%}"
        if task.message:
            status += f"  {task.message!r}"
    rows = [
        ("task", task.id),
        ("type", f"{task.type}  (queue {task.queue}, priority {task.priority})"),
        ("status", status),
        ("owner", task.owner),
        ("attempt", f"{task.attempt} of {task.max_attempts}"),
        ("worker", task.worker),
        ("created", when(task.created_at)),
        ("updated", when(task.updated_at)),
        ("started", when(task.started_at) if task.started_at else ""),
        ("finished", when(task.finished_at) if task.finished_at else ""),
        ("next retry", when(task.next_retry_at) if task.next_retry_at else ""),
        ("expires", when(task.expires_at) if task.expires_at and not task.terminal else ""),
        ("lease until", when(task.lease_deadline) if task.lease_deadline else ""),
        ("error", task.error_kind),
        ("reason", task.reason),
        ("supersedes", task.supersedes),
        ("superseded by", task.superseded_by),
        ("idempotency key", task.idempotency_key),
        ("args", _json(task.args)),
        ("result", _json(task.result) if task.result is not None else ""),
    ]
    return "\n".join(f"{name:<16}{value}" for name, value in rows if value not in ("", None))


def _what(kind: str, verb: str, from_: str, to: str, stage: str, extra: dict) -> str:
    if kind == "transition":
        return f"{verb} {from_ or '-'} -> {to}"
    if kind == "stage":
        return f"stage {stage}"
    if kind == "progress":
        return f"progress {float(extra.get('progress') or 0):.0%} {extra.get('message', '')}".rstrip()
    if kind == "stale":
        return f"stale {verb} refused (token {extra.get('token', '?')})"
    return kind


def history_table(history: list[Event]) -> str:
    rows = [
        [
            when(e.at),
            _what(e.kind, e.verb, e.from_, e.to, e.stage, e.extra),
            e.stage,
            e.attempt or "",
            e.worker,
            e.by,
            e.reason,
        ]
        for e in history
    ]
    return table(["at", "what", "stage", "attempt", "worker", "by", "reason"], rows, right={3})


def event_line(ev: dict) -> str:
    """One stream event (engine/core/streams.py stream_event) as one line."""
    extra = {k: v for k, v in ev.items() if k in ("progress", "message", "token")}
    what = _what(
        ev.get("kind", ""), ev.get("verb", ""), ev.get("from", ""), ev.get("to", ""), ev.get("stage", ""), extra
    )
    parts = [when(ev.get("at")), ev.get("task_id", ""), ev.get("type", ""), what]
    for name in ("attempt", "worker", "by", "reason"):
        value = ev.get(name)
        if value not in (None, "", 0):
            parts.append(f"{name}={value}")
    return "  ".join(str(p) for p in parts)


def stats_tables(stats: dict) -> str:
    states = [s.value for s in State]
    out = [
        table(
            ["queue", *states, "stale rejections"],
            [[q, *(s["counts"].get(st, 0) for st in states), s["stale_rejections"]] for q, s in stats.items()],
            right=set(range(1, len(states) + 2)),
        )
    ]
    tis = [[q, *(_secs(s["time_in_state"].get(st)) for st in states)] for q, s in stats.items() if s["time_in_state"]]
    if tis:
        out.append("\nmean time in state (seconds, over tasks that left it)")
        out.append(table(["queue", *states], tis, right=set(range(1, len(states) + 1))))
    stages = [[q, name, _secs(v)] for q, s in stats.items() for name, v in sorted(s["time_in_stage"].items())]
    if stages:
        out.append("\nmean time in stage (seconds)")
        out.append(table(["queue", "stage", "mean"], stages, right={2}))
    failures = [[q, kind, n] for q, s in stats.items() for kind, n in sorted(s["failures"].items())]
    if failures:
        out.append("\nfailures by kind")
        out.append(table(["queue", "kind", "count"], failures, right={2}))
    return "\n".join(out)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
