"""Reading the queues' event streams: the entries lua/lib/record.lua ``emit`` writes, as the
dicts the web's SSE sends and ``ghostless tail`` prints.

Read-only: every write to a stream goes through the scripts (engine/core/scripts.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from redis.crc import key_slot

from ghostless.core.cluster import is_cluster
from ghostless.core.models import history_entry
from ghostless.core.states import State
from ghostless.core.text import int_or_text, text

STREAM_ID_RE = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
MAX_SEQ = (1 << 64) - 1  # the largest ms or seq part of a stream id
TERMINAL_VALUES = frozenset(s.value for s in State if s.terminal)
_INT_FIELDS = ("version", "attempt", "token")
POLL_MS = 50  # on a Redis Cluster: the pause after a round of stream reads that found no entry


def parse_stream_id(value: object) -> tuple[int, int] | None:
    """``"<ms>-<seq>"`` as a comparable pair, or None when malformed."""
    m = STREAM_ID_RE.fullmatch(value) if isinstance(value, str) else None
    if not m or int(m.group(1)) > MAX_SEQ or int(m.group(2)) > MAX_SEQ:
        return None
    return int(m.group(1)), int(m.group(2))


def follow_streams(client, streams: dict[str, str], count: int, block_ms: int) -> Iterator[tuple[str, list]]:
    """The entries after each stream's position (``streams``: key -> last id read) as
    ``(key, [(id, fields), ...])``, at most ``count`` per stream, waiting up to ``block_ms`` for one.

    On one Redis, or when every stream is in one slot: one ``XREAD BLOCK``. A Redis Cluster refuses
    one XREAD over keys of several slots (each queue has its own), so there: one non-blocking read
    per stream in one pipeline (one round trip per node), and a pause of ``POLL_MS`` when none had an
    entry; an entry then comes up to ~50 ms later than one XREAD BLOCK would bring it. A failed
    read's error (a shard failing over) is raised after the entries of the reads that answered.
    """
    if not is_cluster(client) or len({key_slot(k.encode()) for k in streams}) <= 1:
        for key, rows in client.xread(streams, count=count, block=block_ms) or []:
            yield text(key), rows
        return
    pipe = client.pipeline()
    for key, position in streams.items():
        # XRANGE after the position is a non-blocking XREAD whose key redis-py finds by itself
        # (for an XREAD it asks a node, COMMAND GETKEYS: one more round trip per stream)
        pipe.xrange(key, "(" + position, "+", count=count)
    replies = pipe.execute(raise_on_error=False)
    found = False
    for key, rows in zip(streams, replies):
        if rows and not isinstance(rows, Exception):
            found = True
            yield key, rows
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    if not found:
        time.sleep(POLL_MS / 1000)


#: The fields of a stream entry (lua/lib/record.lua ``emit``): the task's id, owner, type and version,
#: then the event itself as one line in the form of a history entry (engine/core/models.py
#: ``history_entry`` reads both), its time left out where the entry's id gives it. The same five
#: for every event: Redis keeps an entry that has its node's first entry's fields as its values
#: alone. An entry written before these lines has the event's fields as fields of its own (``kind``,
#: ``at``, ``verb``, ...); it reads the same.
STREAM_FIELDS = ("id", "owner", "type", "version", "e")


def stream_event(queue: str, stream_id, fields: dict) -> dict:
    """A stream entry (lua/lib/record.lua ``emit``) as the JSON the web sends."""
    # an entry of an earlier release wrote every field of its layout, '' where the event had none
    f = {text(k): text(v) for k, v in fields.items() if v not in (b"", "")}
    if "e" in f:
        line = history_entry(f.pop("e"))
        # A line without a time has its entry id's (lua/lib/record.lua emit: XADD '<now>-*').
        line["at"] = str(line.get("at", text(stream_id).partition("-")[0]))
        f.update({k: str(v) for k, v in line.items()})
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
            ev[name] = int_or_text(raw)
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
