"""Reading the queues' event streams: the entries lua/lib/record.lua ``emit`` writes, as the
dicts the web's SSE sends and ``ghostless tail`` prints.

Read-only: every write to a stream goes through the scripts (engine/core/scripts.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ghostless.core.states import State
from ghostless.core.text import text

STREAM_ID_RE = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
MAX_SEQ = (1 << 64) - 1  # the largest ms or seq part of a stream id
TERMINAL_VALUES = frozenset(s.value for s in State if s.terminal)
_INT_FIELDS = ("version", "attempt", "token")


def parse_stream_id(value: object) -> tuple[int, int] | None:
    """``"<ms>-<seq>"`` as a comparable pair, or None when malformed."""
    m = STREAM_ID_RE.fullmatch(value) if isinstance(value, str) else None
    if not m or int(m.group(1)) > MAX_SEQ or int(m.group(2)) > MAX_SEQ:
        return None
    return int(m.group(1)), int(m.group(2))


def stream_event(queue: str, stream_id, fields: dict) -> dict:
    """A stream entry (lua/lib/record.lua ``emit``) as the JSON the web sends."""
    f = {text(k): text(v) for k, v in fields.items()}
    ev = {
        "stream_id": text(stream_id),
        "queue": queue,
        "task_id": f.pop("id", ""),
        "kind": f.pop("kind", ""),
        "owner": f.pop("owner", ""),
        "type": f.pop("type", ""),
        "at": int(f.pop("at", "0") or 0) / 1000,
        "from": f.pop("from", ""),
        "to": f.pop("to", ""),
    }
    for name in _INT_FIELDS:
        if name in f:
            raw = f.pop(name)
            ev[name] = int(raw) if raw.lstrip("-").isdigit() else raw
    if "progress" in f:
        try:
            ev["progress"] = float(f.pop("progress"))
        except ValueError:
            pass
    ev.update(f)
    return ev


def is_terminal(ev: dict) -> bool:
    return ev.get("kind") == "transition" and ev.get("to") in TERMINAL_VALUES


def read_stream(engine, queue: str, start: str, end: str = "+", batch: int = 500) -> Iterator[dict]:
    """Events of a queue's stream from ``start`` (``(id``: after id) to ``end``, in order.
    Raises ValueError for a malformed ``(id``."""
    key = engine.keys.queue_key(queue, "events")
    if start.startswith("("):  # as the next id, inclusive: no error after the largest id, any Redis
        after = parse_stream_id(start[1:])
        if after is None:
            raise ValueError(f"not a stream id: {start[1:]!r}")
        ms, seq = after
        if seq < MAX_SEQ:
            start = f"{ms}-{seq + 1}"
        elif ms < MAX_SEQ:
            start = f"{ms + 1}-0"
        else:
            return
    while True:
        rows = engine.redis.xrange(key, start, end, count=batch)
        for sid, fields in rows:
            yield stream_event(queue, sid, fields)
        if len(rows) < batch:
            return
        start = "(" + text(rows[-1][0])


def stream_may_be_trimmed(engine, queue: str, after: str) -> bool:
    """True when events after ``after`` may have been trimmed away (the stream is at its cap
    and its oldest entry is newer than ``after``; or ``after`` is no stream id)."""
    key = engine.keys.queue_key(queue, "events")
    if engine.redis.xlen(key) < engine.config.stream_maxlen:
        return False
    first = engine.redis.xrange(key, "-", "+", count=1)
    oldest, since = parse_stream_id(text(first[0][0])) if first else None, parse_stream_id(after)
    return oldest is not None and (since is None or oldest > since)
