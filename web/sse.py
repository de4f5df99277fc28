"""Server-Sent Events: one task's live timeline, and a feed of all the caller's tasks.

``GET /api/tasks/<id>/events``: a ``snapshot`` event (the task and its history), then one
event per transition, stage, progress report (and refused stale call) of the task, each
with its queue stream id as SSE ``id``; the stream ends after a terminal state. With
``Last-Event-ID`` (or ``?last_event_id=``) it replays what came after that id instead of a
snapshot, then goes live: nothing is lost or repeated.

``GET /api/events``: every event of the caller's tasks (an admin's: all), across queues.
Its SSE id is a composite position over the queue streams (web/positions.py). It starts
with a ``ready`` event carrying the starting position.

Views only check access and set headers; generators read live events from the process's
broker (web/broker.py) and replay from the queue streams; cleanup runs in ``finally``.
"""

from __future__ import annotations

import json
import logging
import time

import redis
from flask import Blueprint, Response, current_app, g, request

from . import queries as wq
from .api import task_json
from .auth import require_user, stream_credential
from .broker import Dropped
from .deps import get_broker, get_engine, get_guard
from .errors import ApiError
from .held import STREAM, busy_retry_ms, held
from .positions import Positions

bp = Blueprint("sse", __name__, url_prefix="/api")
log = logging.getLogger("ghostless.web")


@bp.before_request
def _authenticate():
    g.caller = require_user()


def format_event(id: str | None = None, event: str | None = None, data=None, retry: int | None = None) -> str:
    """One SSE message. ``data`` is sent as JSON (a str as is, one ``data:`` line per line)."""
    lines = []
    for name, value in (("id", id), ("event", event)):
        if value is not None:
            value = str(value)
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"SSE {name} must not contain CR, LF or NUL")
            lines.append(f"{name}: {value}")
    if retry is not None:
        lines.append(f"retry: {int(retry)}")
    if data is not None:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        lines += [f"data: {line}" for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines) + "\n\n"


def format_comment(text: str) -> str:
    return "".join(f": {line}\n" for line in text.splitlines() or [""]) + "\n"


def _last_event_id() -> str | None:
    return request.headers.get("Last-Event-ID") or request.args.get("last_event_id") or None


def _stream(generator) -> Response:
    return Response(
        generator, mimetype="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


def retry_later(why: str) -> Response:
    """The refusal EventSource survives: 200, a comment saying ``why``, ``retry:`` (come back in
    GHOSTLESS_BUSY_RETRY_MS) and the end. Any non-200 status would make it give up for good."""
    return _stream([format_comment(why), format_event(retry=busy_retry_ms())])


@bp.errorhandler(redis.ConnectionError)
@bp.errorhandler(redis.TimeoutError)
def _redis_unavailable(e):
    """Redis unreachable, slow, or the web's pool busy past its wait (web/pool.py) while a stream
    opens (its credential check included): come back later, as from a cap."""
    log.warning("stream refused, to be retried: Redis unavailable: %s", e)
    return retry_later("unavailable: the task store did not answer in time, retrying later")


def _held_stream(open_stream) -> Response:
    """The stream ``open_stream(watch)`` opens, holding one of the caller's stream slots until its
    response closes. ``open_stream`` does the opening reads and returns (events, cleanup), or
    raises (an ApiError: its answer; Redis unavailable: ``retry_later``); its events hand their
    subscriber to ``watch`` (web/guard.py ends it when the client leaves or the credential goes).
    Past a cap (web/held.py) it is not called: a ``retry_later`` answer, before any Redis work."""
    release = held().acquire(STREAM, g.caller.name)
    if release is None:
        return retry_later("busy: too many open streams, retrying later")
    try:
        events, cleanup = open_stream(_watcher(get_guard(), request.environ, stream_credential()))
    except BaseException:
        release()
        raise
    response = _stream(_ending_on_redis_errors(events))
    response.call_on_close(cleanup)  # also when the generator never started
    response.call_on_close(release)
    return response


def _ending_on_redis_errors(events):
    """A stream that ends, rather than breaks, when Redis fails mid-stream: the browser then
    reconnects with Last-Event-ID and resumes once Redis is back."""
    try:
        yield from events
    except redis.RedisError as e:
        log.warning("event stream ended early: %s", e)
    finally:
        events.close()


def _settings() -> tuple[float, int]:
    return current_app.config["GHOSTLESS_SSE_KEEPALIVE"], current_app.config["GHOSTLESS_SSE_RETRY_MS"]


@bp.get("/tasks/<task_id>/events")
def task_events(task_id: str):
    last = _last_event_id()
    last = last if wq.parse_stream_id(last) is not None else None
    owner = None if g.caller.admin else g.caller.name

    def open_stream(watch):
        engine, broker = get_engine(), get_broker()
        opened = open_task(engine, broker, task_id, owner)
        if opened is None:
            raise ApiError(404, "not_found", "task not found")
        events = task_stream(engine, broker, task_id, last, *_settings(), watch=watch, opened=opened)
        return events, lambda: broker.unsubscribe(opened[0])

    return _held_stream(open_stream)


def open_task(engine, broker, task_id: str, owner: str | None):
    """(subscriber, task, history, position) of a task stream opening now, or None (unsubscribed)
    when there is no such task of ``owner``'s (None: anyone's). Subscribed first: an event newer
    than the snapshot's position is in the buffer. One Redis read (the snapshot script)."""
    sub = broker.subscribe(task_id=task_id)
    try:
        task, history, position = wq.snapshot(engine, task_id, owner)
    except BaseException:
        broker.unsubscribe(sub)
        raise
    if task is None:
        broker.unsubscribe(sub)
        return None
    return sub, task, history, position


def task_stream(
    engine,
    broker,
    task_id: str,
    last_id: str | None,
    keepalive: float,
    retry_ms: int,
    watch=None,
    opened=None,
):
    """Snapshot (or replay after ``last_id``), then live events until a terminal state; ends early
    when its subscriber is ended (``watch(sub)``: web/guard.py, when the client leaves or its
    credential goes). ``opened``: what ``open_task`` returned (else it opens here, anyone's task)."""
    sub = opened[0] if opened else broker.subscribe(task_id=task_id)
    unwatch = watch(sub) if watch else _nothing
    try:
        yield format_event(retry=retry_ms)
        task, history, position = opened[1:] if opened else wq.snapshot(engine, task_id)
        if task is None:
            return
        # A snapshot when the client has nothing, may have missed trimmed events, or names an
        # event this stream has not written yet (not an id we sent): replaying from it would
        # skip every event up to that id, the terminal one included.
        if (
            last_id is None
            or wq.parse_stream_id(last_id) > wq.parse_stream_id(position)
            or wq.stream_may_be_trimmed(engine, task.queue, last_id)
        ):
            yield format_event(
                position, "snapshot", {"task": task_json(task), "history": [e.to_dict() for e in history]}
            )
            last_id = None  # the snapshot is where this client is now
        else:
            for ev in wq.read_stream(engine, task.queue, f"({last_id}", position):
                if ev["task_id"] == task_id:
                    yield format_event(ev["stream_id"], ev["kind"], ev)
                    if wq.is_terminal(ev):
                        return
        if task.terminal:
            return
        sent = max(wq.parse_stream_id(position), wq.parse_stream_id(last_id or "0-0"))

        def render(ev: dict) -> str | None:
            nonlocal sent
            sid = wq.parse_stream_id(ev["stream_id"])
            if sid <= sent:
                return None
            sent = sid
            return format_event(ev["stream_id"], ev["kind"], ev)

        yield from _live(sub, render, keepalive, until=wq.is_terminal)
    finally:
        unwatch()
        broker.unsubscribe(sub)


@bp.get("/events")
def all_events():
    owner = None if g.caller.admin else g.caller.name

    def open_stream(watch):
        engine, broker = get_engine(), get_broker()
        positions = Positions.parse(_last_event_id())
        if positions is not None and positions.later_than(wq.server_ms(engine.redis)):
            positions = None  # not an id we sent: start afresh rather than skip events until then
        events = feed_stream(engine, broker, owner, positions, *_settings(), watch=watch)
        return events, events.close

    return _held_stream(open_stream)


def feed_stream(
    engine,
    broker,
    owner: str | None,
    positions: Positions | None,
    keepalive: float,
    retry_ms: int,
    watch=None,
):
    """Every event of ``owner``'s tasks (all with None), replayed after ``positions``, then live;
    ends early when its subscriber is ended (``watch(sub)``, as ``task_stream``)."""
    sub = broker.subscribe(everything=True) if owner is None else broker.subscribe(owner=owner)
    unwatch = watch(sub) if watch else _nothing
    try:
        yield format_event(retry=retry_ms)
        if positions is None:
            positions = Positions(wq.server_ms(engine.redis))
            yield format_event(str(positions), "ready", {"owner": owner, "position": str(positions)})
        else:
            for queue in engine.queues():
                for ev in wq.read_stream(engine, queue, positions.start(queue)):
                    if owner is None or ev["owner"] == owner:
                        positions.advance(queue, ev["stream_id"])
                        yield format_event(str(positions), ev["kind"], ev)

        def render(ev: dict) -> str | None:
            if not positions.is_new(ev["queue"], ev["stream_id"]):
                return None
            positions.advance(ev["queue"], ev["stream_id"])
            return format_event(str(positions), ev["kind"], ev)

        yield from _live(sub, render, keepalive)
    finally:
        unwatch()
        broker.unsubscribe(sub)


CREDENTIAL_CHECK = 2.0  # s: an open stream ends this soon after its token is revoked or its session ends


def _nothing() -> None:
    pass


def _watcher(guard, environ: dict, credential: tuple[str, str | None]):
    """``watch(sub)``: the guard watches ``sub``'s client and credential; returns the unwatch."""

    def watch(sub):
        handle = guard.watch(sub, environ, credential)
        return lambda: guard.unwatch(handle)

    return watch


def _live(sub, render, keepalive: float, until=None):
    """The subscriber's events as they come, each as ``render(ev)`` writes it (None: already sent,
    skipped), and a keep-alive comment whenever ``keepalive`` seconds passed without one; ends
    after an event ``until(ev)`` is true of, or when the subscriber is dropped (it fell behind:
    the client reconnects with Last-Event-ID and replays the rest) or ended (web/guard.py: the
    client left, or the credential is gone, seen within CREDENTIAL_CHECK). An idle stream wakes
    only for its keep-alive."""
    quiet_until = time.monotonic() + keepalive
    while True:
        try:
            ev = sub.next(max(0.0, quiet_until - time.monotonic()))
        except Dropped:
            return
        if ev is None:
            if time.monotonic() >= quiet_until:
                quiet_until = time.monotonic() + keepalive
                yield format_comment("keep-alive")
            continue
        text = render(ev)
        if text is not None:
            quiet_until = time.monotonic() + keepalive
            yield text
            if until is not None and until(ev):
                return
