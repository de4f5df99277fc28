"""The body of an SSE response: its messages, and the iterator the server reads them from.

``EventStream`` is what a stream's response hands the server (werkzeug's direct passthrough):
first its opening messages (a generator: the retry hint, then the snapshot or the replay), then
its subscriber's live events. A class, not generators nested in werkzeug's own: gevent keeps
each switched-out connection's stack on the heap, so an idle stream costs its stack's depth in
memory; this one waits one call below the server's loop (bench/watchers.py: thousands idle).
"""

from __future__ import annotations

import json
import logging
import time

import redis

from ghostless.core.streams import parse_stream_id

from .broker import Dropped, Event

log = logging.getLogger("ghostless.web")


def format_event(id: str | None = None, event: str | None = None, data=None, retry: int | None = None) -> str:
    """One SSE message. ``data`` is sent as JSON (a str as is, one ``data:`` line per line)."""
    lines = []
    for name, value in (("id", id), ("event", event)):
        if value is not None:
            value = str(value)
            if "\n" in value or "\r" in value or "\0" in value:
                raise ValueError(f"SSE {name} must not contain CR, LF or NUL")
            lines.append(f"{name}: {value}")
    if retry is not None:
        lines.append(f"retry: {int(retry)}")
    if data is not None:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        lines += [f"data: {line}" for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines) + "\n\n"


def event_message(id: str | None, ev: dict) -> str:
    """``format_event(id, ev["kind"], ev)``; for a broker's Event, all but the ``id`` line (a task's
    stream id, or a feed's position: each subscriber's own) is made once for every subscriber."""
    if not isinstance(ev, Event):
        return format_event(id, ev["kind"], ev)
    if ev.message is None:
        ev.message = format_event(None, ev["kind"], ev)
    return ev.message if id is None else format_event(id)[:-1] + ev.message


def parsed_id(ev: dict) -> tuple[int, int] | None:
    """``parse_stream_id(ev["stream_id"])``, parsed once for every subscriber of a broker's Event."""
    return ev.parsed_id if isinstance(ev, Event) else parse_stream_id(ev.get("stream_id"))


def format_comment(text: str) -> str:
    return "".join(f": {line}\n" for line in text.splitlines() or [""]) + "\n"


class EventStream:
    """The messages of one stream, as bytes, until it ends; ``close()`` (at its end, and the
    server's however it ended, also unstarted; once) runs ``on_close`` (callables, in order).

    ``opening`` yields the first messages and returns the live events' ``render(ev)`` (text, or
    None for an event already sent), or None when the stream ends there. Then ``sub``'s events
    as they come, and a keep-alive comment whenever ``keepalive`` seconds passed without a
    message; it ends after an event ``until(ev)`` is true of, when the subscriber is dropped (it
    fell behind: the client reconnects with Last-Event-ID and replays the rest) or ended
    (web/guard.py: the client left, or its credential is gone), or when Redis fails in the
    opening (it ends rather than breaks: the browser reconnects and resumes once Redis is back).
    An idle stream wakes only for its keep-alive."""

    __slots__ = ("_opening", "_quiet_until", "_render", "keepalive", "on_close", "sub", "until")

    def __init__(self, sub, opening, keepalive: float, until=None, on_close=()):
        self.sub, self._opening, self.keepalive, self.until = sub, opening, keepalive, until
        self.on_close = list(on_close)
        self._render = None
        self._quiet_until = 0.0

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        if self._opening is not None:
            try:
                return next(self._opening).encode()
            except StopIteration as done:
                self._render = done.value
            except redis.RedisError as e:
                log.warning("event stream ended early: %s", e)
            self._opening = None
            self._quiet_until = time.monotonic() + self.keepalive
            if self._render is not None:
                # Nothing to write, before the wait: the server holds the last message it wrote
                # (the snapshot, the stream's largest) until the next one, for as long as it idles.
                return b""
        if self._render is not None:
            text = self._live()
            if text is not None:
                return text.encode()
        self.close()  # ended: let go of its subscriber (and slot) now, not when the server gets to it
        raise StopIteration

    def _live(self) -> str | None:
        """The next live message; None when the stream ends."""
        while True:
            try:
                ev = self.sub.next(max(0.0, self._quiet_until - time.monotonic()))
            except Dropped:
                return None
            if ev is None:
                if time.monotonic() >= self._quiet_until:
                    self._quiet_until = time.monotonic() + self.keepalive
                    return format_comment("keep-alive")
                continue
            text = self._render(ev)
            if text is not None:
                self._quiet_until = time.monotonic() + self.keepalive
                if self.until is not None and self.until(ev):
                    self._render = None  # this one is the last
                return text

    def __del__(self) -> None:  # dropped unclosed (never by a WSGI server): let go all the same
        self.close()

    def close(self) -> None:
        self._render = None
        opening, self._opening = self._opening, None
        on_close, self.on_close = self.on_close, []
        try:
            if opening is not None:
                opening.close()
        finally:
            for callback in on_close:
                callback()
