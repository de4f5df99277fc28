"""Following the queues' event streams (``ghostless tail``).

Every transition, stage, progress report and refused stale call is an entry of its
queue's stream (lua/lib/record.lua ``emit``). A Tail reads them with XREAD BLOCK over
every queue's stream (new queues are picked up as they appear; on a Redis Cluster by polling,
engine/core/streams.py ``follow_streams``), or over one task's queue, in stream-id order (two
queues' events of the same millisecond come in either order), as the dicts the web's SSE sends
(engine/core/streams.py).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator

from ghostless.core.clock import server_ms
from ghostless.core.keys import parse_task_id
from ghostless.core.streams import MAX_SEQ, follow_streams, is_terminal, parse_stream_id, read_stream, stream_event
from ghostless.core.text import text

BATCH = 500


class Tail:
    """Events after ``since`` (``$``: from now on; ``0``: every event the streams still hold;
    or a stream id), of every queue or of one task (``task_id``).

    Raises ValueError for a malformed ``since``.
    """

    def __init__(self, engine, since: str = "$", task_id: str | None = None, block_ms: int = 1000):
        if since not in ("$", "0") and parse_stream_id(since if "-" in since else f"{since}-0") is None:
            raise ValueError(f"--since must be $, 0 or a stream id such as 1700000000000-0, got {since!r}")
        self.engine, self.task_id, self.block_ms = engine, task_id, block_ms
        self.since = since if since in ("$", "0") or "-" in since else f"{since}-0"
        self.queue = parse_task_id(task_id) if task_id else None
        start = server_ms(engine.redis)
        # A queue that appears later starts at this instant (with `$`), so nothing is missed.
        self._later = f"{start - 1}-{MAX_SEQ}" if self.since == "$" else self._literal()
        self.positions: dict[str, str] = {}
        for queue in self._queues():
            self.positions[queue] = self._initial(queue)

    def _literal(self) -> str:
        return "0-0" if self.since == "0" else self.since

    def _key(self, queue: str) -> str:
        return self.engine.keys.queue_key(queue, "events")

    def _queues(self) -> list[str]:
        return [self.queue] if self.queue else self.engine.queues()

    def _initial(self, queue: str) -> str:
        if self.since != "$":
            return self._literal()
        # `$` resolved now, not at the first XREAD: events between the two are not lost.
        last = self.engine.redis.xrevrange(self._key(queue), count=1)
        return text(last[0][0]) if last else self._later

    def describe(self) -> str:
        what = f"task {self.task_id}" if self.task_id else f"{len(self.positions)} queue(s)"
        return f"{what} from {'now' if self.since == '$' else self.since}"

    def _wanted(self, ev: dict) -> bool:
        return self.task_id is None or ev["task_id"] == self.task_id

    def _done(self, ev: dict) -> bool:
        return self.task_id is not None and is_terminal(ev)

    def events(self, follow: bool = True) -> Iterator[dict]:
        """The events in stream order; with ``follow``, wait for more (until a --task ends)."""
        if not follow:
            yield from self._drain()
            return
        while True:
            for queue in self._queues():
                self.positions.setdefault(queue, self._later)
            if not self.positions:
                self.engine.redis.time()  # no queue yet: wait, but notice Redis going away
                time.sleep(self.block_ms / 1000)
                continue
            streams = {self._key(q): p for q, p in self.positions.items()}
            batch = []
            for key, entries in follow_streams(self.engine.redis, streams, BATCH, self.block_ms):
                queue = self._queue_of(key)
                for sid, fields in entries:
                    batch.append(stream_event(queue, sid, fields))
                if entries:
                    self.positions[queue] = text(entries[-1][0])
            batch.sort(key=lambda e: parse_stream_id(e["stream_id"]))
            for ev in batch:
                if self._wanted(ev):
                    yield ev
                    if self._done(ev):
                        return

    def _drain(self) -> Iterator[dict]:
        streams = [read_stream(self.engine, q, "(" + p) for q, p in self.positions.items()]
        for ev in heapq.merge(*streams, key=lambda e: parse_stream_id(e["stream_id"])):
            if self._wanted(ev):
                yield ev
                if self._done(ev):
                    return

    def _queue_of(self, key: str) -> str:
        for queue in self.positions:
            if self._key(queue) == key:
                return queue
        raise KeyError(key)
