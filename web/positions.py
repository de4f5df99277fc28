"""Resumable positions across every queue's event stream: the SSE ``id`` of ``/api/events``.

Each queue has its own stream, so one stream id cannot say where a feed of all queues
stands. The SSE id of that feed is::

    <base ms>[,<queue>:<stream id>]...        e.g.  1700000000000,images:1700000000123-0

``base`` is the Redis server time (ms) when the feed started. A queue listed with a stream
id has been delivered up to and including that id; every other queue has been delivered
nothing from ``base`` on. Resuming replays each queue from there (``XRANGE``), so nothing is
lost or repeated. Only queues that had an event for this client are listed, and queue names
cannot contain ``,`` or ``:``.
"""

from __future__ import annotations

import re

from ghostless.core.streams import parse_stream_id

BASE_RE = re.compile(r"[0-9]{1,19}")
QUEUE_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # engine/core/keys.py's alphabet (fullmatch: no trailing newline)
MAX_QUEUES = 1000  # a Last-Event-ID listing more is not one we made


class Positions:
    __slots__ = ("_seen", "base", "queues")

    def __init__(self, base: int, queues: dict[str, str] | None = None):
        self.base = base
        self.queues = dict(queues or {})
        self._seen = {q: parse_stream_id(s) for q, s in self.queues.items()}  # queues' ids, parsed

    @classmethod
    def parse(cls, text: object) -> Positions | None:
        """The positions an SSE id names, or None when it is not one of ours."""
        if not isinstance(text, str) or not text or len(text) > 100_000:
            return None
        base, *parts = text.split(",")
        if not BASE_RE.fullmatch(base) or len(parts) > MAX_QUEUES:
            return None
        queues = {}
        for part in parts:
            queue, _, sid = part.partition(":")
            if not QUEUE_RE.fullmatch(queue) or parse_stream_id(sid) is None or queue in queues:
                return None
            queues[queue] = sid
        return cls(int(base), queues)

    def start(self, queue: str) -> str:
        """XRANGE start of what this client has not had from ``queue``."""
        sid = self.queues.get(queue)
        return f"({sid}" if sid else f"{self.base}-0"

    def is_new(self, queue: str, stream_id: str) -> bool:
        """True when the event at ``stream_id`` of ``queue`` has not been delivered."""
        return self._is_new(queue, parse_stream_id(stream_id))

    def _is_new(self, queue: str, parsed: tuple[int, int] | None) -> bool:
        seen = self._seen.get(queue)
        return parsed is not None and (parsed > seen if seen is not None else parsed >= (self.base, 0))

    def later_than(self, ms: int) -> bool:
        """True when these positions name a time after ``ms`` (ids no stream has written yet)."""
        return self.base > ms or any(parse_stream_id(sid)[0] > ms for sid in self.queues.values())

    def advance(self, queue: str, stream_id: str, parsed: tuple[int, int] | None = None) -> None:
        self.queues[queue] = stream_id
        self._seen[queue] = parsed or parse_stream_id(stream_id)

    def take(self, queue: str, stream_id: str, parsed: tuple[int, int] | None = None) -> bool:
        """Advance to the event at ``stream_id`` (``parsed``: already parsed) of ``queue`` when it is
        new (``is_new``); whether it was."""
        parsed = parsed or parse_stream_id(stream_id)
        if not self._is_new(queue, parsed):
            return False
        self.advance(queue, stream_id, parsed)
        return True

    def __str__(self) -> str:
        if len(self.queues) == 1:  # the usual feed, once per message it sends
            ((queue, sid),) = self.queues.items()
            return f"{self.base},{queue}:{sid}"
        return ",".join([str(self.base), *(f"{q}:{s}" for q, s in sorted(self.queues.items()))])
