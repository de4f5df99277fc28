"""What resuming task streams missed, read once per queue for all of them.

A task stream that reconnects with ``Last-Event-ID`` replays its task's events after that id.
They are interleaved with every other task's in the queue's stream, so one replay read the
queue's events since then and kept its own: after a web restart, when every page resumes at
once, 1,000 pages that missed one event each read 1,000 events each, and a quarter of them were
not open after 30 s (bench/watchers.py --resume). ``Replays`` keeps, per queue, the events of one
span of its stream indexed by task, read once and grown as resuming streams ask for more: a
resume costs a lookup, and the reads of the span (the trim check with them), once for them all.

A span holds every event between its two ends (a stream's ids only grow, so no event can come
later inside a span already read) and is read afresh once it is older than ``keep`` seconds, so
it is never longer than the events of a few seconds' resumes plus the distance they reach back.
"""

from __future__ import annotations

import threading
import time

import redis

from . import queries as wq
from .eventstream import event_message

KEEP = 10.0  # s a queue's span serves resuming streams before it is read afresh
LOCK_WAIT = 10.0  # s a resume waits for its queue's span, being read by another, before its retry answer


class _Span:
    """Every event of a queue's stream after ``start`` up to ``end`` (parsed ids), by task id, each
    as (its parsed id, its SSE message, whether it ends its task's stream): a message is made once
    for every stream that replays it, and held in a tenth of the memory of the event it says."""

    __slots__ = ("broken", "by_task", "end", "lock", "made", "start")

    def __init__(self):
        self.broken: Exception | None = None  # the error its read failed with (it is then replaced)
        self.start: tuple[int, int] | None = None  # None: nothing read yet
        self.end: tuple[int, int] = (0, 0)
        self.by_task: dict[str, list[tuple[tuple[int, int], str, bool]]] = {}
        self.lock = threading.Lock()
        self.made = time.monotonic()


class Replays:
    """``messages(queue, task_id, after, upto)``: the SSE messages of a task's events in its queue's
    stream after id ``after`` up to ``upto`` (both ids this stream holds or held), oldest first,
    each with whether it ends the task's stream (a terminal state); None when events after
    ``after`` may have been trimmed away (engine/core/streams.py ``stream_may_be_trimmed``: then
    the stream sends a snapshot). That check is made only when a span is read from further back
    than it reaches, or when as many events as the stream keeps came after its end: what a span
    holds was read before it could be trimmed. A resume waits at most LOCK_WAIT for a span another
    is reading, and gets the error of that read when it fails."""

    def __init__(self, engine, keep: float = KEEP):
        self.engine, self.keep = engine, keep
        self._spans: dict[str, _Span] = {}
        self._lock = threading.Lock()
        self.reads = 0  # stream reads so far (tests)

    def messages(self, queue: str, task_id: str, after: str, upto: str) -> list[tuple[str, bool]] | None:
        first, last = wq.parse_stream_id(after), wq.parse_stream_id(upto)
        if first is None or last is None:
            raise ValueError(f"not stream ids: {after!r}, {upto!r}")
        if last <= first:
            return []
        span = self._span(queue)
        if not span.lock.acquire(timeout=LOCK_WAIT):
            raise redis.TimeoutError(f"the replay of queue {queue!r} is busy past {LOCK_WAIT:g}s")
        try:
            if span.broken is not None:  # its read failed while this one waited: so fails this one
                raise span.broken
            try:
                return self._messages(span, queue, task_id, first, last)
            except redis.RedisError as e:
                span.broken = e
                with self._lock:
                    if self._spans.get(queue) is span:
                        del self._spans[queue]  # the next resume starts afresh
                raise
        finally:
            span.lock.release()

    def _messages(self, span: _Span, queue: str, task_id: str, first, last) -> list[tuple[str, bool]] | None:
        if span.start is None or first < span.start:
            if wq.stream_may_be_trimmed(self.engine, queue, _text(first)):
                return None
            if span.start is None:
                span.start = span.end = first
            else:
                self._add(span, queue, first, span.start, front=True)
                span.start = first
        if last > span.end:
            # To the stream's end: the stream keeps at least its newest ``stream_maxlen`` entries
            # (MAXLEN ~), so when fewer than that came after the span's end, none was trimmed.
            newest, read = self._add(span, queue, span.end, None, front=False)
            if (read >= self.engine.config.stream_maxlen or newest < last) and wq.stream_may_be_trimmed(
                self.engine, queue, _text(span.end)
            ):
                span.start = None  # events right after its end may be gone: it starts afresh
                span.by_task.clear()
                return None
            span.end = max(newest, last)
        return [(text, ends) for at, text, ends in span.by_task.get(task_id, ()) if first < at <= last]

    def _span(self, queue: str) -> _Span:
        now = time.monotonic()
        with self._lock:
            span = self._spans.get(queue)
            if span is None or now - span.made > self.keep:
                span = self._spans[queue] = _Span()
            for old in [q for q, s in self._spans.items() if now - s.made > self.keep]:
                del self._spans[old]  # queues nobody resumes in any more
            return span

    def _add(self, span: _Span, queue: str, after, upto, front: bool) -> tuple[tuple[int, int], int]:
        """Read the events after ``after`` up to ``upto`` (None: the stream's end) into ``span``,
        before or after what it holds: (the newest id read, or ``after``; how many were read)."""
        self.reads += 1
        got: dict[str, list[tuple[tuple[int, int], str, bool]]] = {}
        newest, read = after, 0
        for ev in wq.read_stream(self.engine, queue, f"({_text(after)}", _text(upto) if upto else "+"):
            newest, read = wq.parse_stream_id(ev["stream_id"]), read + 1
            got.setdefault(ev["task_id"], []).append((newest, event_message(ev["stream_id"], ev), wq.is_terminal(ev)))
        for task_id, events in got.items():
            held = span.by_task.setdefault(task_id, [])
            if front:
                held[:0] = events
            else:
                held += events
        return newest, read


def _text(at: tuple[int, int]) -> str:
    return f"{at[0]}-{at[1]}"
